package comm

import (
	"fmt"
	"os"
	"sync"

	"github.com/gohccl/gohccl/goimpl/config"
)

// Logger writes leveled lines to stderr, each prefixed with the rank.
type Logger struct {
	level  config.Level
	prefix string
}

var logMu sync.Mutex // keeps lines from several communicators whole

// NewLogger returns a logger for rank of size at level.
func NewLogger(level config.Level, rank, size int) *Logger {
	return &Logger{level: level, prefix: fmt.Sprintf("[gohccl %d/%d]", rank, size)}
}

func (l *Logger) printf(lv config.Level, format string, args ...any) {
	if l == nil || lv > l.level {
		return
	}
	line := fmt.Sprintf("%s %s %s\n", l.prefix, lv, fmt.Sprintf(format, args...))
	logMu.Lock()
	os.Stderr.WriteString(line)
	logMu.Unlock()
}

// Warnf logs at WARN.
func (l *Logger) Warnf(format string, args ...any) { l.printf(config.Warn, format, args...) }

// Infof logs at INFO.
func (l *Logger) Infof(format string, args ...any) { l.printf(config.Info, format, args...) }

// Tracef logs at TRACE.
func (l *Logger) Tracef(format string, args ...any) { l.printf(config.Trace, format, args...) }

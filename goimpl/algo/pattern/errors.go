package pattern

import (
	"errors"
	"fmt"
)

// Errors returned by the Validate methods. They are wrapped with the
// offending values, so test for them with errors.Is.
var (
	// ErrSize reports a group size below 1.
	ErrSize = errors.New("pattern: group size must be at least 1")
	// ErrRank reports a rank or root outside [0, size).
	ErrRank = errors.New("pattern: rank out of range")
)

// validate checks size and each of the named ranks against it.
func validate(size int, names []string, ranks ...int) error {
	if size < 1 {
		return fmt.Errorf("%w: size is %d", ErrSize, size)
	}
	for i, r := range ranks {
		if r < 0 || r >= size {
			return fmt.Errorf("%w: %s %d is not in [0, %d)", ErrRank, names[i], r, size)
		}
	}
	return nil
}

var (
	rankName     = []string{"rank"}
	rankRootName = []string{"rank", "root"}
)

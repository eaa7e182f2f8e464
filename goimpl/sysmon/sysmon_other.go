//go:build !linux

package sysmon

import "errors"

const nanosleep = -1

func setNice(int, int) error { return errors.ErrUnsupported }

func gettid() int { return 0 }

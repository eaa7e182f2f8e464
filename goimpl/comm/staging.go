package comm

import (
	"time"

	"github.com/gohccl/gohccl/goimpl/config"
)

// Fail breaks the communicator with err from outside its collectives, as a
// failed collective does: later operations fail at once with err, and every
// peer gets an abort frame that carries it, so that a peer waiting in the
// same collective learns why at once instead of waiting out its timeout.
// The device staging (goimpl/stage) calls it when an accelerator runtime
// call fails between the host collectives of a staged operation.
func (c *Comm) Fail(err error) { c.fail(err) }

// Config returns the configuration the communicator was created with.
func (c *Comm) Config() config.Config { return c.cfg }

// Deadline returns when an operation given timeout must end: timeout from
// now, or the communicator's default timeout when timeout is 0 or negative.
func (c *Comm) Deadline(timeout time.Duration) time.Time { return c.deadline(timeout) }

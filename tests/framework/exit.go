package framework

import (
	"errors"
	"fmt"
	"os/exec"
	"time"
)

// ExitCode waits up to timeout for broker id's process to end on its own
// and answers its exit status (-1 for a signal); an error if it still
// runs then.
func (c *Cluster) ExitCode(id int, timeout time.Duration) (int, error) {
	c.mu.Lock()
	p := c.broker(id).proc
	c.mu.Unlock()
	select {
	case <-p.Done():
	case <-time.After(timeout):
		return 0, fmt.Errorf("%s (pid %d) still runs after %v", p.Name, p.Pid(), timeout)
	}
	var ee *exec.ExitError
	if err := p.Err(); errors.As(err, &ee) {
		return ee.ExitCode(), nil
	} else if err != nil {
		return 0, err
	}
	return 0, nil
}

// LogPath is the log file of broker id (every start appends to it).
func (c *Cluster) LogPath(id int) string { return c.logPath(c.broker(id).Name) }

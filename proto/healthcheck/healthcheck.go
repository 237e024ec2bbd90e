// Package healthcheck is the client side of the HTTP health endpoints every
// Sundial server serves (/livez: the process is up; /readyz: it can serve;
// /healthz: an alias of /readyz). Container images without a shell or curl
// run the servers' --probe flag, which calls Probe.
package healthcheck

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// ProbeTimeout bounds one Probe.
const ProbeTimeout = 5 * time.Second

// Probe GETs url and fails unless it answers 200; the error carries the
// status code and the reason the server gave.
func Probe(url string) error {
	client := &http.Client{Timeout: ProbeTimeout}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %d: %s", url, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

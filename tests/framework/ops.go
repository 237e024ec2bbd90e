package framework

import (
	"context"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// OnCluster calls fn with a Cluster client of the first running proxy (the
// path shardctl takes: the proxy forwards to a broker, the broker to the
// meta leader) and closes the connection after it. It answers fn's error,
// or errNoProxy while no proxy runs.
func (c *Cluster) OnCluster(ctx context.Context, fn func(ctx context.Context, cl sundialv1.ClusterClient) error) error {
	addr := ""
	for i, p := range c.Proxies {
		if c.ProxyRunning(i + 1) {
			addr = p.GRPCAddr
			break
		}
	}
	if addr == "" {
		return errNoProxy
	}
	conn, err := c.DialProxy(addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	return fn(ctx, sundialv1.NewClusterClient(conn))
}

// ClusterInfoContext is ClusterInfo bounded by ctx too.
func (c *Cluster) ClusterInfoContext(ctx context.Context) (*sundialv1.ClusterInfo, error) {
	return c.clusterInfo(ctx)
}

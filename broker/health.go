package broker

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/tlsfiles"
)

// readiness says whether a broker can serve, and if not why: the cluster is
// bootstrapped (its first shards are on the ring), every replica the meta state places on this node is
// started, each of them knows its shard's leader, and the meta group has a
// leader. hosted lists the started event-shard replicas, leaders maps each
// to its leader's node id (0: unknown), metaLeader is the meta group's
// leader (0: unknown). It is pure; Server.Ready feeds it.
func readiness(st *meta.State, node uint64, hosted []uint64, leaders map[uint64]uint64, metaLeader uint64) (bool, string) {
	if metaLeader == 0 {
		return false, "the meta group has no known leader"
	}
	if len(st.Shards) == 0 {
		return false, "the cluster has no event shards yet (bootstrap in progress)"
	}
	if len(st.RingShards()) == 0 {
		return false, "the cluster's first shards are starting: none is on the ring yet (bootstrap in progress)"
	}
	for _, id := range st.ShardIDs() {
		if _, placed := st.Shards[id].ReplicaOn(meta.NodeID(node)); placed && !slices.Contains(hosted, uint64(id)) {
			return false, fmt.Sprintf("the replica of shard %d placed on this node has not started", id)
		}
	}
	for _, id := range hosted {
		if leaders[id] == 0 {
			return false, fmt.Sprintf("shard %d has no known leader", id)
		}
	}
	return true, ""
}

// Ready reports whether the broker can serve (see readiness; a node the
// meta state refused, see Refusal, is never ready); /readyz,
// /healthz and the gRPC health service answer it.
func (s *Server) Ready() bool {
	ready, _ := s.readiness()
	return ready
}

func (s *Server) readiness() (bool, string) {
	if err := s.host.Refusal(); err != nil {
		return false, err.Error()
	}
	return readiness(s.host.MetaClient().Meta(), s.cfg.NodeID, s.host.Replicas().HostedShards(), s.host.Replicas().ShardLeaders(), s.host.MetaClient().MetaLeader())
}

// livez answers 200 while the process serves HTTP.
func livez(w http.ResponseWriter, _ *http.Request) {
	fmt.Fprintln(w, "ok")
}

// readyz answers 200 when the broker is ready, else 503 with the reason;
// a broker started insecure adds tlsfiles.InsecureWarning on a line of its
// own.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	warning := ""
	if s.cfg.Insecure {
		warning = tlsfiles.InsecureWarning + "\n"
	}
	if ready, reason := s.readiness(); !ready {
		http.Error(w, "not ready: "+reason+"\n"+warning, http.StatusServiceUnavailable)
		return
	}
	fmt.Fprint(w, "ok\n"+warning)
}

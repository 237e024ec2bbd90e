package host

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/sundialmq/sundial/broker/internal/identity"
	"github.com/sundialmq/sundial/meta"
)

// admitted reports whether the meta state lets this node run replicas: its
// node record, if any, is not removed and has this data dir's
// incarnation, and the cluster id
// is the data dir's. It records the cluster id in the data dir when the
// data dir has none yet. The broker checked both with its peers before
// starting; this catches what no peer could answer then. A refused node
// stops its meta replica too: a replica of another data dir must not vote.
// It runs on the run goroutine.
func (h *Host) admitted(st *meta.State) bool {
	if h.refusal.Load() != nil {
		return false
	}
	self := st.Nodes[meta.NodeID(h.cfg.NodeID)]
	if self != nil && self.State == meta.NodeRemoved {
		h.refuse(fmt.Errorf("%w: node %d was removed from the cluster (shardctl remove-node): a removed node id is never reused; "+
			"stop this broker, and start the machine on an empty data dir with --join to join as a new node",
			identity.ErrRemoved, h.cfg.NodeID))
		return false
	}
	if self != nil && self.Incarnation != "" && self.Incarnation != h.cfg.Incarnation {
		h.refuse(fmt.Errorf("%w: node %d is registered with incarnation %s, but data dir %s holds incarnation %s: "+
			"this data dir is not the one node %d ran on; restore that data dir, or remove node %d from the cluster and use a new node id",
			identity.ErrUnsafeRejoin, h.cfg.NodeID, self.Incarnation, h.cfg.DataDir, h.cfg.Incarnation, h.cfg.NodeID, h.cfg.NodeID))
		return false
	}
	// The record names this start once this process registered it; a
	// record with a later start, or this start registered by another
	// process, comes from a run after the one this data dir was copied in.
	if self != nil && (self.Starts > h.cfg.Starts || (self.Starts == h.cfg.Starts && self.Starts > 0 && self.Run != "" && self.Run != h.cfg.Run)) {
		err := &DataDirError{Kind: ErrDataDirBehind, DataDir: h.cfg.DataDir, NodeID: h.cfg.NodeID,
			Detail: fmt.Sprintf("this is the node's start %d on the data dir, but the meta state registered start %d of another process", h.cfg.Starts, self.Starts)}
		h.refuse(err)
		// Like Dragonboat's finding of the same: the process's fault
		// handler ends it (sundial-broker: exit status 3).
		if f := faultHandler.Load(); f != nil && *f != nil {
			(*f)(err)
		}
		return false
	}
	switch {
	case st.ClusterID == "" || st.ClusterID == h.clusterID:
		return true
	case h.clusterID == "":
		if h.cfg.RecordClusterID != nil {
			if err := h.cfg.RecordClusterID(st.ClusterID); err != nil {
				h.log.Error("record cluster id", zap.String("cluster_id", st.ClusterID), zap.Error(err))
				return false
			}
		}
		h.clusterID = st.ClusterID
		h.log.Info("cluster id recorded in the data dir", zap.String("cluster_id", st.ClusterID))
		return true
	default:
		h.refuse(fmt.Errorf("%w: data dir %s belongs to cluster %s, but the meta group is cluster %s: "+
			"point data_dir at this node's data for cluster %s, or initial_members at the cluster of this data dir",
			identity.ErrMismatch, h.cfg.DataDir, h.clusterID, st.ClusterID, st.ClusterID))
		return false
	}
}

func (h *Host) refuse(err error) {
	if !h.refusal.CompareAndSwap(nil, &err) {
		return
	}
	h.log.Error("node refused: replicas not started", zap.Error(err))
	if err := h.nh.StopShard(meta.ShardID); err != nil {
		h.log.Warn("stop meta replica", zap.Error(err))
	}
}

// Refusal is why the meta state refused this node (see admitted), nil if
// it did not.
func (h *Host) Refusal() error {
	if p := h.refusal.Load(); p != nil {
		return *p
	}
	return nil
}

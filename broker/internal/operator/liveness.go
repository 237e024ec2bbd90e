package operator

import (
	"time"

	"github.com/sundialmq/sundial/meta"
)

// liveness is the healer's pure core: it remembers when each node was last
// seen alive (a Peer.Identify it answered as itself) and decides which
// nodes to declare dead or alive. It reads no clock; every call is given
// now. It belongs to one term of leading meta: a new leader makes a new
// one, whose clocks start at the moment it began leading (a node the new
// leader has not heard from yet counts as seen then), so no node is
// declared dead sooner than the timeout after a leadership change, however
// long the previous leader had not heard from it. Likewise a node that
// appears during the term (joined, added) counts as seen when it was first
// probed.
//
// Owned by the healer's loop goroutine.
type liveness struct {
	timeout time.Duration
	since   time.Time                 // when this term of leading began
	seen    map[meta.NodeID]time.Time // last seen alive, this term
	first   map[meta.NodeID]time.Time // first probed, this term
	down    map[meta.NodeID]bool      // the latest probe got no answer
}

func newLiveness(timeout time.Duration, since time.Time) *liveness {
	return &liveness{timeout: timeout, since: since, seen: map[meta.NodeID]time.Time{}, first: map[meta.NodeID]time.Time{}, down: map[meta.NodeID]bool{}}
}

// observe records the outcome of one probe of node id at now.
func (l *liveness) observe(id meta.NodeID, alive bool, now time.Time) {
	if _, ok := l.first[id]; !ok {
		l.first[id] = now
	}
	l.down[id] = !alive
	if alive {
		l.seen[id] = now
	}
}

// lastSeen is when node id was last seen alive; when it was not seen this
// term, when it was first probed, or else the start of the term.
func (l *liveness) lastSeen(id meta.NodeID) time.Time {
	if t, ok := l.seen[id]; ok {
		return t
	}
	if t, ok := l.first[id]; ok {
		return t
	}
	return l.since
}

// suspects are the active or draining nodes but self unseen for after
// (shorter than the dead timeout) at now: they may be down, and plans
// give them nothing until they answer or are declared dead. Removed and
// dead nodes are not suspects. In id order.
func (l *liveness) suspects(st *meta.State, self meta.NodeID, after time.Duration, now time.Time) []meta.NodeID {
	var out []meta.NodeID
	for _, id := range st.NodeIDs() {
		n := st.Nodes[id]
		if id == self || (n.State != meta.NodeActive && n.State != meta.NodeDraining) {
			continue
		}
		if now.Sub(l.lastSeen(id)) >= after {
			out = append(out, id)
		}
	}
	return out
}

// verdict is what decide concludes for one round.
type verdict struct {
	// Dead are the active or draining nodes unseen for the timeout, to be
	// declared dead; empty when guarded.
	Dead []meta.NodeID
	// Alive are the nodes the meta state holds dead that answered the
	// latest probe, to be declared alive.
	Alive []meta.NodeID
	// Guarded says nodes were due to be declared dead but more than half
	// of the cluster's nodes look down (the latest probe got no answer),
	// so none was: this node is more likely cut off than they are dead.
	Guarded bool
	// Down and Total count the nodes that look down and the nodes
	// weighed (registered, not removed, this node included).
	Down, Total int
}

// decide weighs st's nodes at now; self (the meta leader) is alive.
// Removed nodes are left out. A node is declared dead once it is active or
// draining and has not been seen for the timeout; a dead one is declared
// alive once it answers. Deterministic: nodes in id order.
func (l *liveness) decide(st *meta.State, self meta.NodeID, now time.Time) verdict {
	var v verdict
	var due []meta.NodeID
	for _, id := range st.NodeIDs() {
		n := st.Nodes[id]
		if n.State == meta.NodeRemoved {
			continue
		}
		v.Total++
		if id == self {
			continue
		}
		if l.down[id] {
			v.Down++
		}
		switch {
		case n.State == meta.NodeDead:
			if _, probed := l.down[id]; probed && !l.down[id] {
				v.Alive = append(v.Alive, id)
			}
		case now.Sub(l.lastSeen(id)) >= l.timeout:
			due = append(due, id)
		}
	}
	if len(due) > 0 && 2*v.Down > v.Total {
		v.Guarded = true
		return v
	}
	v.Dead = due
	return v
}

// NodeLiveness is what the meta leader's healer knows of one node, as of
// its latest round: what an operator sees of a node that stopped before it
// is declared dead.
type NodeLiveness struct {
	// LastSeen is when the node last answered a probe since this broker
	// began leading meta (the meta leader itself: the round); zero when it
	// has not answered yet.
	LastSeen time.Time
	// Unreachable says the latest probe got no answer.
	Unreachable bool
	// Suspect says the node has gone unseen for SuspectAfter and is not
	// declared dead (see Healer.Suspects).
	Suspect bool
}

// view is what l knows of st's nodes at now, removed nodes left out; self
// (the meta leader) answers at now, suspects are this round's.
func (l *liveness) view(st *meta.State, self meta.NodeID, suspects map[meta.NodeID]bool, now time.Time) map[meta.NodeID]NodeLiveness {
	out := map[meta.NodeID]NodeLiveness{}
	for _, id := range st.NodeIDs() {
		if st.Nodes[id].State == meta.NodeRemoved {
			continue
		}
		if id == self {
			out[id] = NodeLiveness{LastSeen: now}
			continue
		}
		out[id] = NodeLiveness{LastSeen: l.seen[id], Unreachable: l.down[id], Suspect: suspects[id]}
	}
	return out
}

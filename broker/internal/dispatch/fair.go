package dispatch

import (
	"container/heap"
	"strings"

	"github.com/sundialmq/sundial/broker/internal/keys"
)

// fairScheduler owns the weighted fair queueing state of the FAIR queues
// that attached consumers read: per partition of a queue, a fairTree of the
// fairness keys that have something due.
//
// It has no lock of its own: only the loop touches it (picking and
// pruning), under the dispatcher's mu.
type fairScheduler struct {
	queues map[queueKey]*fairState
	// maxKeys caps the active keys of one tree (defaultMaxFairKeys).
	maxKeys int
}

// defaultMaxFairKeys caps the active fairness keys one partition of a FAIR
// queue keeps in memory. Past it, keys that became due wait for active
// ones to go idle (see dueIndex.catchUp).
const defaultMaxFairKeys = 1 << 16

// fairState is one FAIR queue's trees, by partition.
type fairState struct {
	parts map[uint32]*fairTree
}

func newFairScheduler() *fairScheduler {
	return &fairScheduler{queues: map[queueKey]*fairState{}, maxKeys: defaultMaxFairKeys}
}

// tree returns the tree of q, made empty if q had none.
func (s *fairScheduler) tree(q keys.Queue) *fairTree {
	k := queueKey{q.Topic, q.Group}
	st, ok := s.queues[k]
	if !ok {
		st = &fairState{parts: map[uint32]*fairTree{}}
		s.queues[k] = st
	}
	t, ok := st.parts[q.Partition]
	if !ok {
		t = newFairTree(s.maxKeys)
		st.parts[q.Partition] = t
	}
	return t
}

// prune drops the state of queues nobody reads.
func (s *fairScheduler) prune(read func(queueKey) bool) {
	for k := range s.queues {
		if !read(k) {
			delete(s.queues, k)
		}
	}
}

// noKey is the tree node of messages without a fairness key: a leaf of the
// root like any other key.
const noKey = "\x00"

// fairTree is the weighted fair queueing state of one partition of a FAIR
// queue: the tree of fairness-key paths ("tenant", "tenant.job") whose
// leaves are the active keys, those with something due (or being leased)
// when last looked at, each with the virtual time of its node. A node
// served once advances by 1/weight; the next pick at each level goes to the
// child with the least virtual time, so a flooding key cannot starve a
// trickling one and weights split deliveries in proportion. A node added
// (a key that comes back after being idle) starts at its siblings' minimum,
// so idleness earns no credit. A node without an active key below it is
// dropped, so the tree is bounded by the keys with due messages (and by
// maxKeys): keys whose messages are all due later are not in it.
//
// Every non-root node has an active key at or below it.
type fairTree struct {
	root    *fairNode
	nodes   map[string]*fairNode // by path; the root is not in it
	leaves  int                  // active keys
	maxKeys int
}

// fairNode is a node of a fairTree.
type fairNode struct {
	path     string
	parent   *fairNode
	children []*fairNode
	leaf     *fairLeaf // set while path is an active fairness key
	vt       float64   // virtual time

	// A round's state: the children that may still have something to
	// serve, least virtual time first, and whether the node's own key
	// (leaf) has been read dry.
	ready   nodeHeap
	drained bool
}

// fairLeaf is an active fairness key and where its reads resume.
type fairLeaf struct {
	fairnessKey string
	// cursor is the fair-index key where the next round's read of this key
	// starts: the first entry the last read saw. Below it the key has
	// nothing due but copies inserted since, whose catch-up lowers it.
	cursor []byte

	// A round's reads: where the next one starts (in buf once a read
	// took an entry), where they stop, the first entry they saw, and
	// whether this round read the key at all.
	pos, buf, until []byte
	seen            []byte
	touched         bool
}

func newFairTree(maxKeys int) *fairTree {
	return &fairTree{root: &fairNode{}, nodes: map[string]*fairNode{}, maxKeys: maxKeys}
}

// activate makes fk an active key, adding the nodes of its path (each at
// its siblings' least virtual time), and returns its node; nil when fk is
// not active and maxKeys are.
func (t *fairTree) activate(fk string) *fairNode {
	path := fk
	if path == "" {
		path = noKey
	}
	if n, ok := t.nodes[path]; ok && n.leaf != nil {
		return n
	}
	if t.leaves >= t.maxKeys {
		return nil
	}
	t.leaves++
	parent := t.root
	parts := strings.Split(path, ".")
	for i := range parts {
		p := strings.Join(parts[:i+1], ".")
		n, ok := t.nodes[p]
		if !ok {
			n = &fairNode{path: p, parent: parent}
			for j, c := range parent.children {
				if j == 0 || c.vt < n.vt {
					n.vt = c.vt
				}
			}
			parent.children = append(parent.children, n)
			t.nodes[p] = n
		}
		parent = n
	}
	parent.leaf = &fairLeaf{fairnessKey: fk}
	return parent
}

// deactivate drops n's key, and with it every node left without an active
// key below it, forgetting their virtual times.
func (t *fairTree) deactivate(n *fairNode) {
	n.leaf = nil
	t.leaves--
	for n != t.root && n.leaf == nil && len(n.children) == 0 {
		p := n.parent
		for i, c := range p.children {
			if c == n {
				p.children = append(p.children[:i], p.children[i+1:]...)
				break
			}
		}
		delete(t.nodes, n.path)
		n = p
	}
}

// round serves up to limit items, each from the active key chosen by
// weighted fair queueing, reading only the keys it chooses: next returns a
// key's next item, false when it has none left this round (the key is then
// passed over for the rest of the round, and charged nothing).
func (t *fairTree) round(limit int, weights map[string]int32, next func(*fairNode) (dueItem, bool)) []dueItem {
	t.root.reset()
	var out []dueItem
	for len(out) < limit {
		item, ok := t.take(t.root, weights, next)
		if !ok {
			break
		}
		out = append(out, item)
	}
	return out
}

// reset readies n's subtree for a round.
func (n *fairNode) reset() {
	n.drained = false
	n.ready = append(n.ready[:0], n.children...)
	for _, c := range n.children {
		c.reset()
	}
	heap.Init(&n.ready)
}

// take serves one item from n's subtree, charging every node on the way
// down; false when nothing is left below n this round. A key can be both a
// leaf and a parent ("a" and "a.b"): its own items are served when its
// children have none.
func (t *fairTree) take(n *fairNode, weights map[string]int32, next func(*fairNode) (dueItem, bool)) (dueItem, bool) {
	for n.ready.Len() > 0 {
		c := n.ready[0]
		if item, ok := t.take(c, weights, next); ok {
			w := float64(1)
			if v, ok := weights[c.path]; ok && v > 0 {
				w = float64(v)
			}
			c.vt += 1 / w
			heap.Fix(&n.ready, 0)
			return item, true
		}
		heap.Pop(&n.ready)
	}
	if n.leaf != nil && !n.drained {
		if item, ok := next(n); ok {
			return item, true
		}
		n.drained = true
	}
	return dueItem{}, false
}

// nodeHeap orders sibling nodes by virtual time, then path.
type nodeHeap []*fairNode

func (h nodeHeap) Len() int { return len(h) }
func (h nodeHeap) Less(i, j int) bool {
	if h[i].vt != h[j].vt {
		return h[i].vt < h[j].vt
	}
	return h[i].path < h[j].path
}
func (h nodeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *nodeHeap) Push(x any)   { *h = append(*h, x.(*fairNode)) }
func (h *nodeHeap) Pop() any {
	old := *h
	n := old[len(old)-1]
	*h = old[:len(old)-1]
	return n
}

package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker"
	"github.com/sundialmq/sundial/meta"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// groupModel is the plain model the test compares the cluster with: per
// topic, the ids of its messages in publish order and, per group, the
// index of the first message it must receive. A group gets every message
// whose publish was answered after the call that created it answered, and
// none before; a deleted group is forgotten with its copies.
type groupModel map[string]*modelTopic

type modelTopic struct {
	partitions int32
	msgs       []string
	from       map[string]int // group -> index in msgs of its first message
}

// want answers the messages group of topic must receive, in publish order.
func (m groupModel) want(topic, group string) []string {
	t := m[topic]
	return t.msgs[t.from[group]:]
}

// groupPool are the names the sequence creates, deletes and uses.
var groupPool = []string{"audit", "billing", "crm"}

// groupSteps are the operations the model test draws from.
var groupSteps = []string{
	"create-topic", "create-group", "delete-group", "first-subscribe", "first-receive",
	"update-topic-groups", "publish-auto-create", "publish", "transfer-leader", "move-replica", "add-shards",
}

// groupRun is one run of the model test: the cluster, the model and what
// was done so far (for failure messages).
type groupRun struct {
	t      *testing.T
	c      *Cluster
	cl     sundialv1.ClusterClient
	rng    *rand.Rand
	seed   uint64
	model  groupModel
	done   []string
	topics int
	keys   int
	moves  int
	grown  bool
}

// fatalf fails the run naming the seed and the steps so far.
func (r *groupRun) fatalf(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("seed %d (replay: SUNDIAL_GROUPS_SEED=%d): %s\nsteps: %s", r.seed, r.seed, fmt.Sprintf(format, args...), strings.Join(r.done, "; "))
}

func (r *groupRun) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	r.t.Cleanup(cancel)
	return ctx
}

// Every way a group comes to exist (CreateTopic's groups, CreateGroup, a
// first Subscribe, a first Receive, a topic made by its first publish)
// registers it on every shard of the topic before the call answers, and
// DeleteGroup removes it, across leader transfers, replica moves and
// shards add; UpdateTopic cannot change groups. A seeded random sequence
// of those operations runs against an RF 3 cluster of 8 shards and a
// plain model; at the end every group of every topic is drained and must
// have received exactly the messages the model says.
func TestGroupsFollowModel(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a random sequence of group operations on an 8-shard cluster")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SUNDIAL_GROUPS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("SUNDIAL_GROUPS_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d", seed)
	c := New(t, Config{Shards: 8, Tune: func(bc *broker.Config) {
		bc.Operations.StepTimeout = 20 * time.Second
		bc.Operations.CatchUpTimeout = 60 * time.Second
	}})
	r := &groupRun{t: t, c: c, cl: clusterClient(t, c.Proxy.GRPCAddr()), rng: rand.New(rand.NewPCG(seed, seed>>1)), seed: seed, model: groupModel{}}

	// First the two ways the issue found losing messages, on groups the
	// random steps leave alone: a group named at the creation of a
	// multi-partition topic, and one made by its first Receive (and one
	// by its first Subscribe). Then every kind once, in random order, and
	// more drawn at random; a publish to every topic last, so each group
	// has messages to tell.
	r.createTopic(8, []string{"named"})
	r.firstReceive("t1", "late")
	r.firstSubscribe("t1", "sub")
	r.added("first-subscribe", "t1", "sub")
	r.publish("t1")
	seq := slices.Clone(groupSteps)
	r.rng.Shuffle(len(seq), func(i, j int) { seq[i], seq[j] = seq[j], seq[i] })
	for range 14 {
		seq = append(seq, groupSteps[r.rng.IntN(len(groupSteps))])
	}
	for _, step := range seq {
		r.step(step)
	}
	for _, name := range sortedTopics(r.model) {
		r.publish(name)
	}
	var wrong []string
	for _, name := range sortedTopics(r.model) {
		for _, g := range sortedGroups(r.model[name]) {
			if err := r.drain(name, g); err != nil {
				wrong = append(wrong, err.Error())
			}
		}
	}
	if len(wrong) > 0 {
		r.fatalf("%d groups differ from the model:\n%s", len(wrong), strings.Join(wrong, "\n"))
	}
}

func sortedTopics(m groupModel) []string {
	var out []string
	for name := range m {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

func sortedGroups(t *modelTopic) []string {
	var out []string
	for g := range t.from {
		out = append(out, g)
	}
	slices.Sort(out)
	return out
}

// pickTopic answers a random topic of the model.
func (r *groupRun) pickTopic() string {
	names := sortedTopics(r.model)
	return names[r.rng.IntN(len(names))]
}

// newGroup answers a topic and a pool group it does not have; ok false
// when every topic has every group.
func (r *groupRun) newGroup() (topic, group string, ok bool) {
	for _, i := range r.rng.Perm(len(r.model)) {
		name := sortedTopics(r.model)[i]
		for _, j := range r.rng.Perm(len(groupPool)) {
			if _, has := r.model[name].from[groupPool[j]]; !has {
				return name, groupPool[j], true
			}
		}
	}
	return "", "", false
}

func (r *groupRun) step(kind string) {
	r.t.Helper()
	start, before := time.Now(), len(r.done)
	defer func() {
		if len(r.done) > before {
			r.t.Logf("%s: %s", r.done[len(r.done)-1], time.Since(start).Round(time.Millisecond))
		}
	}()
	switch kind {
	case "create-topic":
		var groups []string
		for _, g := range groupPool {
			if r.rng.IntN(2) == 0 {
				groups = append(groups, g)
			}
		}
		r.createTopic([]int32{1, 4, 8}[r.rng.IntN(3)], groups)
	case "create-group":
		topic, group, ok := r.newGroup()
		if !ok {
			return
		}
		if _, err := r.c.Admin.CreateGroup(r.ctx(), &sundialv1.CreateGroupRequest{Topic: topic, Group: group}); err != nil {
			r.fatalf("CreateGroup(%s, %s) error = %v", topic, group, err)
		}
		r.added(kind, topic, group)
	case "delete-group":
		var cands [][2]string
		for _, name := range sortedTopics(r.model) {
			for _, g := range sortedGroups(r.model[name]) {
				if slices.Contains(groupPool, g) {
					cands = append(cands, [2]string{name, g})
				}
			}
		}
		if len(cands) == 0 {
			return
		}
		pick := cands[r.rng.IntN(len(cands))]
		if _, err := r.c.Admin.DeleteGroup(r.ctx(), &sundialv1.DeleteGroupRequest{Topic: pick[0], Group: pick[1]}); err != nil {
			r.fatalf("DeleteGroup(%s, %s) error = %v", pick[0], pick[1], err)
		}
		delete(r.model[pick[0]].from, pick[1])
		r.done = append(r.done, fmt.Sprintf("delete-group %s/%s", pick[0], pick[1]))
	case "first-subscribe":
		topic, group, ok := r.newGroup()
		if !ok {
			return
		}
		r.firstSubscribe(topic, group)
		r.added(kind, topic, group)
	case "first-receive":
		topic, group, ok := r.newGroup()
		if !ok {
			return
		}
		r.firstReceive(topic, group)
	case "update-topic-groups":
		r.updateTopicGroups(r.pickTopic())
	case "publish-auto-create":
		r.topics++
		name := fmt.Sprintf("auto%d", r.topics)
		r.model[name] = &modelTopic{partitions: 1, from: map[string]int{meta.DefaultGroup: 0}}
		r.publish(name)
	case "publish":
		r.publish(r.pickTopic())
	case "transfer-leader":
		shard := r.shardIDs()[r.rng.IntN(len(r.shardIDs()))]
		r.transfer(shard, 0)
	case "move-replica":
		if r.moves == 2 {
			return
		}
		r.moves++
		r.moveReplica()
	case "add-shards":
		if r.grown {
			return
		}
		r.grown = true
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		if _, err := r.cl.AddShards(ctx, &sundialv1.AddShardsRequest{Count: 2}); err != nil {
			r.fatalf("AddShards(2) error = %v", err)
		}
		r.done = append(r.done, "add-shards 2")
	}
}

// added records group as created on topic from the next message on.
func (r *groupRun) added(how, topic, group string) {
	t := r.model[topic]
	t.from[group] = len(t.msgs)
	r.done = append(r.done, fmt.Sprintf("%s %s/%s", how, topic, group))
}

func (r *groupRun) createTopic(partitions int32, groups []string) {
	r.t.Helper()
	r.topics++
	name := fmt.Sprintf("t%d", r.topics)
	if _, err := r.c.Admin.CreateTopic(r.ctx(), &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: name, Partitions: partitions, Groups: groups}}); err != nil {
		r.fatalf("CreateTopic(%s, %d partitions, groups %v) error = %v", name, partitions, groups, err)
	}
	t := &modelTopic{partitions: partitions, from: map[string]int{meta.DefaultGroup: 0}}
	for _, g := range groups {
		t.from[g] = 0
	}
	r.model[name] = t
	r.done = append(r.done, fmt.Sprintf("create-topic %s/%d %v", name, partitions, groups))
}

// firstReceive receives on a group topic does not have: no deliveries.
func (r *groupRun) firstReceive(topic, group string) {
	r.t.Helper()
	resp, err := r.c.Consumer.Receive(r.ctx(), &sundialv1.ReceiveRequest{Topic: topic, Group: group, MaxMessages: int32(1 + r.rng.IntN(3))})
	if err != nil || len(resp.GetDeliveries()) > 0 {
		r.fatalf("first Receive(%s, %s) = %v, %v; want no deliveries", topic, group, resp, err)
	}
	r.added("first-receive", topic, group)
}

// firstSubscribe opens a stream on a group the topic does not have,
// waits until the group exists (waitGroupCreated), then closes it.
func (r *groupRun) firstSubscribe(topic, group string) {
	r.t.Helper()
	sub := r.c.Subscribe(topic, group, 1, 0)
	defer sub.Close()
	if err := groupCreated(r.c, r.cl, topic, group, 60*time.Second); err != nil {
		r.fatalf("first Subscribe(%s, %s): %v (stream error %v)", topic, group, err, sub.Err())
	}
}

// waitGroupCreated waits until a group a Subscribe stream made exists on
// every shard of its topic: the stream answers nothing before a delivery,
// so this is what its client can see of the group's creation.
func waitGroupCreated(t *testing.T, c *Cluster, topic, group string) {
	t.Helper()
	if err := groupCreated(c, clusterClient(t, c.Proxy.GRPCAddr()), topic, group, 60*time.Second); err != nil {
		t.Fatal(err)
	}
}

// groupCreated polls until ListGroups names group and no operation of
// topic is unfinished (the create-group operation registering it on every
// shard has ended), for at most timeout.
func groupCreated(c *Cluster, cl sundialv1.ClusterClient, topic, group string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		listed, busy, err := groupState(c, cl, topic, group)
		if err == nil && listed && !busy {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("group %s of %s after %s: listed %v, operations of the topic unfinished %v", group, topic, timeout, listed, busy), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// groupState reports whether ListGroups names group and whether an
// operation of topic is unfinished.
func groupState(c *Cluster, cl sundialv1.ClusterClient, topic, group string) (listed, busy bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gs, err := c.Admin.ListGroups(ctx, &sundialv1.ListGroupsRequest{Topic: topic})
	if err != nil {
		return false, false, err
	}
	listed = slices.ContainsFunc(gs.GetGroups(), func(g *sundialv1.Group) bool { return g.GetName() == group })
	ops, err := cl.ListOperations(ctx, &sundialv1.ListOperationsRequest{})
	if err != nil {
		return listed, false, err
	}
	busy = slices.ContainsFunc(ops.GetOperations(), func(op *sundialv1.Operation) bool {
		return op.GetTopic() == topic && (op.GetStatus() == "pending" || op.GetStatus() == "running")
	})
	return listed, busy, nil
}

// updateTopicGroups asks UpdateTopic to add a group: refused naming the
// mask, and the topic's groups stay as they were.
func (r *groupRun) updateTopicGroups(topic string) {
	r.t.Helper()
	before := sortedGroups(r.model[topic])
	_, err := r.c.Admin.UpdateTopic(r.ctx(), &sundialv1.UpdateTopicRequest{
		Topic: &sundialv1.Topic{Name: topic, Groups: append(slices.Clone(before), "extra")}, UpdateMask: []string{"groups"}})
	if status.Code(err) != codes.InvalidArgument {
		r.fatalf("UpdateTopic(%s, groups) error = %v, want InvalidArgument", topic, err)
	}
	gs, err := r.c.Admin.ListGroups(r.ctx(), &sundialv1.ListGroupsRequest{Topic: topic})
	if err != nil {
		r.fatalf("ListGroups(%s) error = %v", topic, err)
	}
	var got []string
	for _, g := range gs.GetGroups() {
		got = append(got, g.GetName())
	}
	slices.Sort(got)
	if !slices.Equal(got, before) {
		r.fatalf("ListGroups(%s) after a refused UpdateTopic = %v, want %v", topic, got, before)
	}
	r.done = append(r.done, "update-topic-groups "+topic)
}

// publish publishes 1 to 16 messages with distinct keys (spread over the
// partitions) to topic, creating it when it is new.
func (r *groupRun) publish(topic string) {
	r.t.Helper()
	n := 1 + r.rng.IntN(16)
	msgs := make([]*sundialv1.Message, n)
	for i := range msgs {
		r.keys++
		msgs[i] = &sundialv1.Message{Topic: topic, Key: fmt.Sprint("k", r.keys), Payload: []byte(fmt.Sprint(topic, "#", len(r.model[topic].msgs)+i))}
	}
	resp, err := r.c.Producer.Publish(r.ctx(), &sundialv1.PublishRequest{Messages: msgs})
	if err != nil {
		r.fatalf("Publish(%d to %s) error = %v", n, topic, err)
	}
	for i, res := range resp.GetResults() {
		if res.GetError() != nil {
			r.fatalf("Publish(%s) result %d error = %v", topic, i, res.GetError())
		}
		r.model[topic].msgs = append(r.model[topic].msgs, res.GetMessageId())
	}
	r.done = append(r.done, fmt.Sprintf("publish %d to %s", n, topic))
}

func (r *groupRun) shardIDs() []uint64 {
	var ids []uint64
	for id := range shards(r.t, r.cl) {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// transfer moves shard's leadership to node to (0: any other) and waits
// until the cluster names the new leader.
func (r *groupRun) transfer(shard, to uint64) {
	r.t.Helper()
	var resp *sundialv1.TransferLeaderResponse
	Eventually(r.t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		resp, err = r.cl.TransferLeader(ctx, &sundialv1.TransferLeaderRequest{ShardId: shard, ToNodeId: to})
		return err
	})
	Eventually(r.t, 60*time.Second, func() error {
		if got := uint64(r.c.LeaderOf(shard)) + 1; got != resp.GetToNodeId() {
			return fmt.Errorf("shard %d led by node %d, want %d", shard, got, resp.GetToNodeId())
		}
		return nil
	})
	r.done = append(r.done, fmt.Sprintf("transfer-leader shard %d to %d", shard, resp.GetToNodeId()))
}

// moveReplica moves a replica of a random shard off a node and back (with
// 3 brokers and 3 replicas there is no other node): remove, add (the new
// replica catches up from the others), then the new replica leads.
func (r *groupRun) moveReplica() {
	r.t.Helper()
	on := shards(r.t, r.cl)
	ids := r.shardIDs()
	shard := ids[r.rng.IntN(len(ids))]
	node := on[shard][r.rng.IntN(len(on[shard]))]
	tt := timeouts(r.c)
	for _, op := range []meta.Operation{
		meta.NewRemoveReplica(meta.EventShardID(shard), meta.NodeID(node), 0, false, "groups model", tt),
		meta.NewAddReplica(meta.EventShardID(shard), meta.NodeID(node), 0, "groups model", tt),
	} {
		id := submit(r.t, r.c, op)[0]
		if got := waitEnded(r.t, r.cl, 120*time.Second)[uint64(id)]; got.GetStatus() != "done" {
			r.fatalf("%s = %v, want done", op.Kind, got)
		}
	}
	r.transfer(shard, node)
	r.done = append(r.done, fmt.Sprintf("move-replica shard %d off node %d and back", shard, node))
}

// drain receives group of topic until it has every message the model
// wants, acking each, and answers what differs: a message it must not
// get, one that does not come, or copies left after all came.
func (r *groupRun) drain(topic, group string) error {
	r.t.Helper()
	want := r.model.want(topic, group)
	wanted := map[string]bool{}
	for _, id := range want {
		wanted[id] = true
	}
	sub := r.c.Subscribe(topic, group, 64, 0)
	defer sub.Close()
	got := map[string]bool{}
	for len(got) < len(want) {
		d, ok := sub.Next(45 * time.Second) // not a time bound: nothing more comes
		if !ok {
			var missing []string
			for _, id := range want {
				if !got[id] {
					missing = append(missing, fmt.Sprintf("%s (shard %d)", id, shardOf(r.t, id)))
				}
			}
			return errors.Join(fmt.Errorf("group %s of %s (%d partitions) received %d of %d messages; missing %d: %v",
				group, topic, r.model[topic].partitions, len(got), len(want), len(missing), missing), sub.Err())
		}
		if !wanted[d.MessageId] {
			return fmt.Errorf("group %s of %s got %s (payload %q), published before the group existed", group, topic, d.MessageId, d.Payload)
		}
		got[d.MessageId] = true
		ack(r.t, r.c, d.Receipt)
		sub.Credit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gs, err := r.c.Admin.ListGroups(ctx, &sundialv1.ListGroupsRequest{Topic: topic})
	if err != nil {
		r.fatalf("ListGroups(%s) error = %v", topic, err)
	}
	for _, g := range gs.GetGroups() {
		if st := g.GetStats(); g.GetName() == group && st.GetScheduled()+st.GetReady() > 0 {
			return fmt.Errorf("group %s of %s holds %d scheduled and %d ready copies after receiving its %d messages", group, topic, st.GetScheduled(), st.GetReady(), len(want))
		}
	}
	return nil
}

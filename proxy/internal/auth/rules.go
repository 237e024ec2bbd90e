package auth

import (
	"google.golang.org/protobuf/proto"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// Rule is what a method needs: Perm on every topic Topics names in a
// request (for a stream, in every message the client sends). Perm Any is
// any permission on the topic (reading a topic's settings); Open needs
// no principal at all (health checks); Authenticated any principal.
type Rule struct {
	Perm Permission
	// Topics names the topics of one request message; nil for methods
	// naming none (checked against "*"). Ack, Nack and Extend name theirs
	// in their signed receipts (receipts.go).
	Topics func(proto.Message) []string
	// Receipts marks Ack, Nack and Extend (and a Subscribe stream's
	// settle frames): the receipts are verified and their topics checked.
	Receipts bool
}

// Pseudo-permissions of rules.
const (
	// Any: any permission on the topic.
	Any Permission = "any"
	// Authenticated: any principal; the answer is filtered (ListTopics)
	// or names no topic (reflection).
	Authenticated Permission = "authenticated"
	// Open: no principal needed.
	Open Permission = "open"
)

func one[Req proto.Message](f func(Req) string) func(proto.Message) []string {
	return func(m proto.Message) []string {
		r, ok := m.(Req)
		if !ok {
			return []string{""}
		}
		return []string{f(r)}
	}
}

// publishTopics: the request's topic and every message's own (a message
// naming another topic than the request is refused later anyway: it is
// checked here too, so no path skips it).
func publishTopics(m proto.Message) []string {
	r, ok := m.(*sundialv1.PublishRequest)
	if !ok {
		return []string{""}
	}
	seen := map[string]bool{}
	var out []string
	add := func(t string) {
		if t != "" && !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	add(r.GetTopic())
	for _, msg := range r.GetMessages() {
		if msg.GetTopic() == "" && r.GetTopic() == "" {
			return []string{""} // no topic at all: only "*" may
		}
		add(msg.GetTopic())
	}
	if len(out) == 0 {
		out = []string{""}
	}
	return out
}

// subscribeTopics: a Subscribe stream's start frame names the topic; its
// settle frames name theirs in receipts.
func subscribeTopics(m proto.Message) []string {
	r, ok := m.(*sundialv1.SubscribeRequest)
	if !ok || r.GetStart() == nil {
		return nil
	}
	return []string{r.GetStart().GetTopic()}
}

// Rules maps every method the proxy serves (full gRPC name) to its rule.
// A method missing here is refused PermissionDenied (default deny), and
// TestEveryMethodHasARule fails.
var Rules = map[string]Rule{
	"/sundial.v1.Producer/Publish":       {Perm: Publish, Topics: publishTopics},
	"/sundial.v1.Producer/PublishStream": {Perm: Publish, Topics: publishTopics},
	"/sundial.v1.Producer/Cancel":        {Perm: Publish, Topics: one(func(r *sundialv1.CancelRequest) string { return r.GetMessage().GetTopic() })},
	"/sundial.v1.Producer/Reschedule":    {Perm: Publish, Topics: one(func(r *sundialv1.RescheduleRequest) string { return r.GetMessage().GetTopic() })},

	"/sundial.v1.Consumer/Subscribe": {Perm: Consume, Topics: subscribeTopics, Receipts: true},
	"/sundial.v1.Consumer/Ack":       {Perm: Consume, Receipts: true},
	"/sundial.v1.Consumer/Nack":      {Perm: Consume, Receipts: true},
	"/sundial.v1.Consumer/Extend":    {Perm: Consume, Receipts: true},
	"/sundial.v1.Consumer/Receive":   {Perm: Consume, Topics: one(func(r *sundialv1.ReceiveRequest) string { return r.GetTopic() })},

	"/sundial.v1.Admin/CreateTopic":        {Perm: Manage, Topics: one(func(r *sundialv1.CreateTopicRequest) string { return r.GetTopic().GetName() })},
	"/sundial.v1.Admin/GetTopic":           {Perm: Any, Topics: one(func(r *sundialv1.GetTopicRequest) string { return r.GetName() })},
	"/sundial.v1.Admin/ListTopics":         {Perm: Authenticated},
	"/sundial.v1.Admin/GetClusterInfo":     {Perm: Admin},
	"/sundial.v1.Admin/UpdateTopic":        {Perm: Manage, Topics: one(func(r *sundialv1.UpdateTopicRequest) string { return r.GetTopic().GetName() })},
	"/sundial.v1.Admin/DeleteTopic":        {Perm: Manage, Topics: one(func(r *sundialv1.DeleteTopicRequest) string { return r.GetName() })},
	"/sundial.v1.Admin/PurgeTopic":         {Perm: Manage, Topics: one(func(r *sundialv1.PurgeTopicRequest) string { return r.GetName() })},
	"/sundial.v1.Admin/CreateGroup":        {Perm: Manage, Topics: one(func(r *sundialv1.CreateGroupRequest) string { return r.GetTopic() })},
	"/sundial.v1.Admin/ListGroups":         {Perm: Any, Topics: one(func(r *sundialv1.ListGroupsRequest) string { return r.GetTopic() })},
	"/sundial.v1.Admin/DeleteGroup":        {Perm: Manage, Topics: one(func(r *sundialv1.DeleteGroupRequest) string { return r.GetTopic() })},
	"/sundial.v1.Admin/ListMessages":       {Perm: Inspect, Topics: one(func(r *sundialv1.ListMessagesRequest) string { return r.GetTopic() })},
	"/sundial.v1.Admin/GetMessage":         {Perm: Inspect, Topics: one(func(r *sundialv1.GetMessageRequest) string { return r.GetMessage().GetTopic() })},
	"/sundial.v1.Admin/DueHistogram":       {Perm: Inspect, Topics: one(func(r *sundialv1.DueHistogramRequest) string { return r.GetTopic() })},
	"/sundial.v1.Admin/RedriveDeadLetters": {Perm: Manage, Topics: one(func(r *sundialv1.RedriveDeadLettersRequest) string { return r.GetTopic() })},

	"/sundial.v1.Cluster/WatchRouting":    {Perm: Admin},
	"/sundial.v1.Cluster/ListShards":      {Perm: Admin},
	"/sundial.v1.Cluster/TransferLeader":  {Perm: Admin},
	"/sundial.v1.Cluster/Rebalance":       {Perm: Admin},
	"/sundial.v1.Cluster/ListOperations":  {Perm: Admin},
	"/sundial.v1.Cluster/JoinCluster":     {Perm: Admin},
	"/sundial.v1.Cluster/DrainNode":       {Perm: Admin},
	"/sundial.v1.Cluster/RemoveNode":      {Perm: Admin},
	"/sundial.v1.Cluster/AddShards":       {Perm: Admin},
	"/sundial.v1.Cluster/CancelOperation": {Perm: Admin},
	"/sundial.v1.Cluster/CreateJoinToken": {Perm: Admin},
	"/sundial.v1.Cluster/ListJoinTokens":  {Perm: Admin},
	"/sundial.v1.Cluster/RevokeJoinToken": {Perm: Admin},

	"/sundial.v1.Auth/CreateToken":      {Perm: Admin},
	"/sundial.v1.Auth/ListTokens":       {Perm: Admin},
	"/sundial.v1.Auth/RevokeToken":      {Perm: Admin},
	"/sundial.v1.Auth/CreateRole":       {Perm: Admin},
	"/sundial.v1.Auth/ListRoles":        {Perm: Admin},
	"/sundial.v1.Auth/DeleteRole":       {Perm: Admin},
	"/sundial.v1.Auth/RotateReceiptKey": {Perm: Admin},

	"/sundial.v1.Backups/CreateBackup":      {Perm: Admin},
	"/sundial.v1.Backups/GetBackupRun":      {Perm: Admin},
	"/sundial.v1.Backups/ListBackupRuns":    {Perm: Admin},
	"/sundial.v1.Backups/ListBackups":       {Perm: Admin},
	"/sundial.v1.Backups/VerifyBackup":      {Perm: Admin},
	"/sundial.v1.Backups/DeleteBackup":      {Perm: Admin},
	"/sundial.v1.Backups/RestoreBackup":     {Perm: Admin},
	"/sundial.v1.Backups/SetBackupSchedule": {Perm: Admin},
	"/sundial.v1.Backups/GetBackupSchedule": {Perm: Admin},

	"/grpc.health.v1.Health/Check": {Perm: Open},
	"/grpc.health.v1.Health/Watch": {Perm: Open},
	"/grpc.health.v1.Health/List":  {Perm: Open},

	"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":      {Perm: Authenticated},
	"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": {Perm: Authenticated},
}

// auditedMethod says the audit log records every call of a method of
// rule, allowed or not: admin actions (cluster, tokens, roles, keys) and
// changes of topics and groups. Refusals of other methods are recorded
// too (Guard.Unary).
func auditedMethod(rule Rule) bool { return rule.Perm == Admin || rule.Perm == Manage }

// Package apierr builds and reads the typed gRPC errors shared by Sundial's
// tiers. Servers put details on statuses (field violations, not-leader,
// wrong-shard); clients read them back with the functions here and never
// match message strings. Classify is the one retry classifier: the SDK,
// the proxy's forwarder and its subscriber all decide with it whether a
// failed call is sent again. The package holds no state.
package apierr

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
)

// FieldViolation names one bad field of a request.
type FieldViolation struct {
	Field       string // e.g. "messages[3].delay_ms"
	Description string
}

// InvalidArgument is an InvalidArgument status listing every violation.
func InvalidArgument(violations ...FieldViolation) error {
	return withViolations(codes.InvalidArgument, violations)
}

// FailedPrecondition is a FailedPrecondition status naming the fields whose
// value does not fit the current state.
func FailedPrecondition(violations ...FieldViolation) error {
	return withViolations(codes.FailedPrecondition, violations)
}

func withViolations(code codes.Code, violations []FieldViolation) error {
	parts := make([]string, 0, len(violations))
	br := &errdetails.BadRequest{}
	for _, v := range violations {
		parts = append(parts, v.Field+": "+v.Description)
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
			Field: v.Field, Description: v.Description,
		})
	}
	st := status.New(code, strings.Join(parts, "; "))
	if d, err := st.WithDetails(br); err == nil {
		st = d
	}
	return st.Err()
}

// Violations returns the field violations carried by err, if any.
func Violations(err error) []FieldViolation {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	var out []FieldViolation
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				out = append(out, FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
			}
		}
	}
	return out
}

// NotLeader is a FailedPrecondition status telling the caller which node
// leads the shard. leaderAddr is empty while no leader is known.
func NotLeader(shard, leaderNode uint64, leaderAddr string) error {
	st := status.New(codes.FailedPrecondition, fmt.Sprintf("shard %d: not the leader (leader node %d at %q)", shard, leaderNode, leaderAddr))
	if d, err := st.WithDetails(&brokerv1.NotLeader{ShardId: shard, LeaderNodeId: leaderNode, LeaderAddr: leaderAddr}); err == nil {
		st = d
	}
	return st.Err()
}

// AsNotLeader returns the NotLeader detail of err.
func AsNotLeader(err error) (*brokerv1.NotLeader, bool) {
	return detail[*brokerv1.NotLeader](err)
}

// WrongShard is a NotFound status for a shard this broker does not host.
func WrongShard(shard, routingVersion uint64) error {
	st := status.New(codes.NotFound, fmt.Sprintf("shard %d is not hosted here (routing version %d)", shard, routingVersion))
	if d, err := st.WithDetails(&brokerv1.WrongShard{ShardId: shard, RoutingVersion: routingVersion}); err == nil {
		st = d
	}
	return st.Err()
}

// Misplaced is a NotFound status with a WrongShard detail naming the topic
// and partition of a message that does not live on shard at routingVersion
// (or is past the topic's partition count): the caller refreshes its
// routing table to at least routingVersion and routes the message again.
func Misplaced(shard, routingVersion uint64, topic string, partition uint32) error {
	st := status.New(codes.NotFound, fmt.Sprintf("topic %q partition %d does not live on shard %d (routing version %d): refresh the routing table and route again", topic, partition, shard, routingVersion))
	if d, err := st.WithDetails(&brokerv1.WrongShard{ShardId: shard, RoutingVersion: routingVersion, Topic: topic, Partition: partition}); err == nil {
		st = d
	}
	return st.Err()
}

// AsWrongShard returns the WrongShard detail of err.
func AsWrongShard(err error) (*brokerv1.WrongShard, bool) {
	return detail[*brokerv1.WrongShard](err)
}

func detail[T any](err error) (T, bool) {
	var zero T
	if err == nil {
		return zero, false
	}
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return zero, false
	}
	for _, d := range se.GRPCStatus().Details() {
		if v, ok := d.(T); ok {
			return v, true
		}
	}
	return zero, false
}

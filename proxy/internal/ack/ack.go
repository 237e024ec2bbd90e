// Package ack routes acks, nacks and extends to the shards named by their
// receipts: it groups receipts by shard, runs one forwarded call per shard
// concurrently, and merges the per-receipt results back into request
// order. A malformed receipt is answered with InvalidArgument on its own
// result; it never fails the others.
//
// Split and Merge are pure; Run starts one goroutine per shard group and
// joins them before returning.
package ack

import (
	"context"
	"sync"

	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/sundialmq/sundial/proto/receipt"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// Group is the receipts of one shard.
type Group struct {
	Shard uint64
	// Indices[j] is the request position of Receipts[j].
	Indices  []int
	Receipts []string
}

// Split groups receipts by shard in order of first appearance. It returns
// the groups and a result slice with the malformed receipts already
// answered (InvalidArgument) and nil at every other position.
func Split(receipts []string) ([]Group, []*sundialv1.ReceiptResult) {
	results := make([]*sundialv1.ReceiptResult, len(receipts))
	byShard := make(map[uint64]int)
	var groups []Group
	for i, s := range receipts {
		r, err := receipt.Parse(s)
		if err != nil {
			results[i] = &sundialv1.ReceiptResult{Receipt: s, Error: &statuspb.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}}
			continue
		}
		g, ok := byShard[r.Shard()]
		if !ok {
			g = len(groups)
			byShard[r.Shard()] = g
			groups = append(groups, Group{Shard: r.Shard()})
		}
		groups[g].Indices = append(groups[g].Indices, i)
		groups[g].Receipts = append(groups[g].Receipts, s)
	}
	return groups, results
}

// Answer is a shard's reply to a group: results in group order, or the
// error that failed the whole group.
type Answer struct {
	Results []*sundialv1.ReceiptResult
	Err     *statuspb.Status
}

// Merge fills results (from Split) with the groups' answers; answers[i]
// answers groups[i]. A failed group gives each of its receipts the error,
// a reply of the wrong length gives codes.Internal.
func Merge(results []*sundialv1.ReceiptResult, groups []Group, answers []Answer) []*sundialv1.ReceiptResult {
	for i, g := range groups {
		a := answers[i]
		if a.Err == nil && len(a.Results) != len(g.Indices) {
			a.Err = &statuspb.Status{Code: int32(codes.Internal), Message: "shard answered a different number of results than receipts sent"}
		}
		for j, idx := range g.Indices {
			switch {
			case a.Err != nil:
				results[idx] = &sundialv1.ReceiptResult{Receipt: g.Receipts[j], Error: a.Err}
			case a.Results[j] == nil:
				results[idx] = &sundialv1.ReceiptResult{Receipt: g.Receipts[j]}
			default:
				results[idx] = a.Results[j]
				if results[idx].GetReceipt() == "" {
					results[idx].Receipt = g.Receipts[j]
				}
			}
		}
	}
	return results
}

// Call forwards one shard's receipts.
type Call func(ctx context.Context, shard uint64, receipts []string) ([]*sundialv1.ReceiptResult, error)

// Run splits receipts, calls every shard group concurrently and merges.
// toStatus turns a group's error into the status each of its receipts
// carries.
func Run(ctx context.Context, receipts []string, call Call, toStatus func(error) *statuspb.Status) []*sundialv1.ReceiptResult {
	groups, results := Split(receipts)
	answers := make([]Answer, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Go(func() {
			res, err := call(ctx, g.Shard, g.Receipts)
			if err != nil {
				answers[i] = Answer{Err: toStatus(err)}
				return
			}
			answers[i] = Answer{Results: res}
		})
	}
	wg.Wait()
	return Merge(results, groups, answers)
}

package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker/internal/identity"
	"github.com/sundialmq/sundial/broker/internal/join"
	"github.com/sundialmq/sundial/broker/internal/service"
	"github.com/sundialmq/sundial/proto/apierr"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// waiting reports whether cfg starts a broker in the waiting state: no
// initial members and no join, so it waits to be added (shardctl add-node).
func (c Config) waiting() bool { return len(c.Join) == 0 && len(c.InitialMembers) == 0 }

// waitForAdd is Start's identity step for a waiting broker. A data dir
// that was added to a cluster before holds its identity with the cluster
// id: it is used at once. Otherwise it serves on lis only health (not
// serving) and the Peer service, whose AddToCluster joins the cluster it
// names (joinCluster) until one succeeds or ctx ends. It returns the
// identity and the listener to serve on from then on (lis is closed and
// its address taken again, since the full server needs a fresh one).
func (s *Server) waitForAdd(ctx context.Context, boundary *service.Boundary, gate *service.Gate, lis net.Listener, advertise string) (identity.Identity, net.Listener, error) {
	if id, found, err := identity.Load(s.cfg.DataDir); err != nil {
		return identity.Identity{}, lis, fmt.Errorf("broker: %w", err)
	} else if found && id.ClusterID != "" {
		s.log.Info("data dir was added to the cluster before: not waiting", zap.Uint64("added_node_id", id.NodeID), zap.String("cluster_id", id.ClusterID))
		return id, lis, nil
	}
	w := &waitingPeer{s: s, advertise: advertise, added: make(chan identity.Identity, 1)}
	srv := waitingServer(boundary, gate, w, s.tls.server)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	s.log.Info("waiting to be added to a cluster (shardctl add-node)", zap.String("grpc_addr", advertise))
	var id identity.Identity
	select {
	case id = <-w.added:
	case <-ctx.Done():
		srv.Stop()
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.log.Warn("waiting server stopped", zap.Error(err))
		}
		return identity.Identity{}, lis, fmt.Errorf("broker: never added to a cluster: %w", ctx.Err())
	}
	addr := lis.Addr().String()
	srv.GracefulStop() // the AddToCluster answer is sent first
	if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		s.log.Warn("waiting server stopped", zap.Error(err))
	}
	next, err := net.Listen("tcp", addr)
	if err != nil {
		return identity.Identity{}, lis, fmt.Errorf("broker: listen grpc again after the add: %w", err)
	}
	return id, next, nil
}

// waitingServer is the gRPC server of a broker waiting to be added: peer
// and health (not serving), behind the broker's Boundary and Gate like the
// full server, so a handler's panic is answered Internal instead of ending
// the process, and with TLS only a broker's or admin's certificate adds
// it.
func waitingServer(boundary *service.Boundary, gate *service.Gate, peer brokerv1.PeerServer, opts ...grpc.ServerOption) *grpc.Server {
	srv := grpc.NewServer(append(append(boundary.ServerOptions(), gate.ServerOptions()...), opts...)...)
	brokerv1.RegisterPeerServer(srv, peer)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	return srv
}

// waitingPeer serves brokerv1.Peer while the broker waits to be added.
type waitingPeer struct {
	brokerv1.UnimplementedPeerServer
	s         *Server
	advertise string
	mu        sync.Mutex // one add at a time; guards s.cfg.Join
	added     chan identity.Identity
	done      bool // guarded by mu
}

// Identify answers node 0 of no cluster: the broker knows none yet.
func (w *waitingPeer) Identify(context.Context, *brokerv1.IdentifyRequest) (*brokerv1.IdentifyResponse, error) {
	return &brokerv1.IdentifyResponse{}, nil
}

// AddToCluster joins the cluster of the brokers at req.Join, presenting
// req's join token (else JoinTokenFile's).
func (w *waitingPeer) AddToCluster(ctx context.Context, req *brokerv1.AddToClusterRequest) (*brokerv1.AddToClusterResponse, error) {
	var bad []apierr.FieldViolation
	if len(req.GetJoin()) == 0 {
		bad = append(bad, apierr.FieldViolation{Field: "join", Description: "required: gRPC addresses of brokers of the cluster"})
	}
	for i, a := range req.GetJoin() {
		if err := join.Parse(a); err != nil {
			bad = append(bad, apierr.FieldViolation{Field: fmt.Sprintf("join[%d]", i), Description: err.Error()})
		}
	}
	if len(req.GetJoinToken()) > validate.MaxJoinTokenBytes {
		bad = append(bad, apierr.FieldViolation{Field: "join_token", Description: fmt.Sprintf("at most %d bytes: the token shardctl join-token create printed", validate.MaxJoinTokenBytes)})
	}
	if len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	if !w.mu.TryLock() {
		return nil, status.Error(codes.Unavailable, "another add of this broker is in progress")
	}
	defer w.mu.Unlock()
	if w.done {
		return nil, status.Error(codes.FailedPrecondition, "broker was added already and is starting")
	}
	w.s.cfg.Join = req.GetJoin()
	id, err := w.s.joinCluster(ctx, w.advertise, req.GetJoinToken())
	if err != nil {
		w.s.cfg.Join = nil
		if errors.Is(err, join.ErrNoBroker) {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	w.done = true
	w.added <- id
	return &brokerv1.AddToClusterResponse{NodeId: id.NodeID, ClusterId: id.ClusterID}, nil
}

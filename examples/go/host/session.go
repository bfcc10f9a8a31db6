package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"example.com/troupe-go/internal/troupe"
	pb "example.com/troupe-go/troupepb"
)

// app is what outlives a stream: the connection and the actor code.
type app struct {
	conn   *grpc.ClientConn
	client pb.ActorClientClient // nested calls and reminders, from turns
	host   pb.AppHostClient
	times  int // registrations so far, for the "registered" line
}

func newApp(conn *grpc.ClientConn) *app {
	return &app{conn: conn, client: pb.NewActorClientClient(conn), host: pb.NewAppHostClient(conn)}
}

// stream is one Attach: its activations, its writer and its running turns.
// Nothing of it survives a reconnect: the daemon fails the in-flight calls of
// a lost stream (UNAVAILABLE) and activates the actors afresh on the next.
type stream struct {
	app      *app
	ctx      context.Context // ends when the stream is torn down
	out      chan *pb.AppMessage
	batches  bool        // the daemon reads AppMessage.batch
	draining atomic.Bool // stopping: start no new turns
	turns    sync.WaitGroup
	actors   actorTable

	cancelMu sync.Mutex
	cancels  map[uint64]context.CancelFunc // running call turns, for CancelTurn
}

// session runs one stream until it breaks (error) or ctx ends (drains, nil).
// registered says whether the daemon accepted the Register.
func (a *app) session(ctx context.Context) (registered bool, err error) {
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	attach, err := a.host.Attach(sctx)
	if err != nil {
		return false, fmt.Errorf("attach: %w", err)
	}
	if err := attach.Send(&pb.AppMessage{Kind: &pb.AppMessage_Register{Register: registration()}}); err != nil {
		return false, fmt.Errorf("send register: %w", recvCause(attach, err))
	}
	first, err := attach.Recv()
	if err != nil {
		return false, registerRefused(attach, err)
	}
	reg := first.GetRegistered()
	if reg == nil {
		return false, fmt.Errorf("daemon answered Register with %T, not Registered", first.GetKind())
	}
	// app.proto: stop (do not reconnect) when the daemon's version differs,
	// or is 0 (a daemon whose protocol we cannot vouch for).
	if reg.GetApiVersion() != apiVersion {
		return false, errPermanent{fmt.Errorf("daemon %s speaks app API version %d, this host %d: use matching versions",
			reg.GetDaemonVersion(), reg.GetApiVersion(), apiVersion)}
	}
	a.times++
	if a.times == 1 {
		announce("registered: account on daemon %s (app API %d, batches %v)", reg.GetDaemonVersion(), reg.GetApiVersion(), reg.GetAcceptsBatches())
	} else {
		announce("registered again (attach %d)", a.times)
	}

	s := &stream{app: a, ctx: sctx, out: make(chan *pb.AppMessage, 256),
		batches: reg.GetAcceptsBatches(), cancels: map[uint64]context.CancelFunc{}}
	s.actors.init()

	stopWriter := make(chan struct{})
	writerDone := make(chan error, 1)
	go func() { writerDone <- s.write(attach, stopWriter) }()
	readerDone := make(chan error, 1)
	go func() { readerDone <- s.read(attach) }()

	readerFinished := false
	select {
	case err = <-readerDone:
		readerFinished = true
	case err = <-writerDone:
		writerDone <- err // write() has returned; keep its result for below
	case <-ctx.Done():
		s.drain()
		err = nil
	}
	close(stopWriter)
	if werr := <-writerDone; err == nil && werr != nil && ctx.Err() == nil {
		err = werr
	}
	// Half-close, then give the daemon a moment to end the stream itself, so
	// that our last answers are read before the connection is cut.
	_ = attach.CloseSend()
	if !readerFinished {
		select {
		case <-readerDone:
		case <-time.After(time.Second):
		}
	}
	cancel()
	return true, err
}

func registration() *pb.Register {
	return &pb.Register{
		AppName:         appName,
		Sdk:             sdkName,
		ApiVersion:      apiVersion,
		MaxReceiveBytes: maxReceiveBytes,
		AcceptsBatches:  true,  // we unpack DaemonBatch (dispatch)
		AcceptsParts:    false, // our messages are small: no reassembly
		AcceptsCancel:   true,  // a cancelled caller cancels the turn's context
		Types:           []*pb.ActorTypeSpec{accountSpec()},
	}
}

// registerRefused explains a stream that ended before Registered; a refusal
// the next attempt would meet again is permanent.
func registerRefused(attach pb.AppHost_AttachClient, err error) error {
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.FailedPrecondition:
		if v := attach.Trailer().Get(troupe.TrailerAPIVersion); len(v) > 0 {
			return errPermanent{fmt.Errorf("daemon refused app API version %d (it speaks %s): %s", apiVersion, v[0], st.Message())}
		}
	case codes.Unauthenticated, codes.PermissionDenied, codes.InvalidArgument:
		return errPermanent{fmt.Errorf("daemon refused the registration: %s: %s", st.Code(), st.Message())}
	}
	return fmt.Errorf("waiting for Registered: %w", err)
}

// recvCause: a failed Send hides the status; Recv returns it (grpc-go docs).
func recvCause(attach pb.AppHost_AttachClient, sendErr error) error {
	if !errors.Is(sendErr, io.EOF) {
		return sendErr
	}
	if _, err := attach.Recv(); err != nil {
		return err
	}
	return sendErr
}

// drain stops taking work and waits (bounded) for running turns, so that
// their answers, not UNAVAILABLE, reach their callers. Work that arrives
// meanwhile stays unanswered; the daemon fails it when the stream ends.
func (s *stream) drain() {
	s.draining.Store(true)
	done := make(chan struct{})
	go func() { s.turns.Wait(); close(done) }()
	select {
	case <-done:
		log.Printf("stopping: running turns answered")
	case <-time.After(drainTimeout):
		log.Printf("stopping: turns still running after %v are abandoned", drainTimeout)
	}
}

// send queues an answer for the writer; a torn-down stream drops it (the
// daemon has failed that call already).
func (s *stream) send(m *pb.AppMessage) {
	select {
	case s.out <- m:
	case <-s.ctx.Done():
	}
}

// write is the stream's only writer (a gRPC stream allows one Send at a
// time). What is ready together goes in one AppBatch (app.proto: fewer tiny
// HTTP/2 frames), at most 256 answers and 1 MiB; it never waits for more.
func (s *stream) write(attach pb.AppHost_AttachClient, stop <-chan struct{}) error {
	const maxBatch, maxBatchBytes = 256, 1 << 20
	for {
		var m *pb.AppMessage
		select {
		case m = <-s.out:
		case <-stop:
			// Flush what turns answered before the stop.
			select {
			case m = <-s.out:
			default:
				return nil
			}
		}
		batch := []*pb.AppMessage{m}
		size := protoSize(m)
	more:
		for s.batches && len(batch) < maxBatch && size < maxBatchBytes {
			select {
			case n := <-s.out:
				batch = append(batch, n)
				size += protoSize(n)
			default:
				break more
			}
		}
		if len(batch) > 1 {
			m = &pb.AppMessage{Kind: &pb.AppMessage_Batch{Batch: &pb.AppBatch{Messages: batch}}}
		}
		if err := attach.Send(m); err != nil {
			return fmt.Errorf("send: %w", recvCause(attach, err))
		}
	}
}

// read hands every daemon message to dispatch until the stream ends.
func (s *stream) read(attach pb.AppHost_AttachClient) error {
	for {
		m, err := attach.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("the daemon closed the stream")
			}
			return err
		}
		if err := s.dispatch(m); err != nil {
			return err
		}
	}
}

// dispatch handles one message, in arrival order. Activate and Deactivate
// are quick and handled here, so they stay ordered with the turns around
// them; each turn runs on its own goroutine, so different actors' turns run
// concurrently (the daemon sends one actor at most one writing turn at once).
func (s *stream) dispatch(m *pb.DaemonMessage) error {
	switch k := m.GetKind().(type) {
	case *pb.DaemonMessage_Batch:
		for _, inner := range k.Batch.GetMessages() {
			if err := s.dispatch(inner); err != nil {
				return err
			}
		}
	case *pb.DaemonMessage_Activate:
		s.send(&pb.AppMessage{Kind: &pb.AppMessage_Activated{Activated: s.activate(k.Activate)}})
	case *pb.DaemonMessage_Deactivate:
		s.send(&pb.AppMessage{Kind: &pb.AppMessage_Deactivated{Deactivated: s.deactivate(k.Deactivate)}})
	case *pb.DaemonMessage_Turn:
		if s.draining.Load() {
			return nil
		}
		s.startTurn(k.Turn)
	case *pb.DaemonMessage_Cancel:
		s.cancelMu.Lock()
		if cancel := s.cancels[k.Cancel.GetCallId()]; cancel != nil {
			cancel()
		}
		s.cancelMu.Unlock()
	case *pb.DaemonMessage_Registered:
		log.Printf("ignoring a second Registered on the stream")
	case *pb.DaemonMessage_Part:
		// We did not set accepts_parts, so a part is a protocol error.
		return errors.New("daemon sent a MessagePart though this host did not set accepts_parts")
	default:
		log.Printf("ignoring an unknown daemon message %T (a newer daemon?)", k)
	}
	return nil
}

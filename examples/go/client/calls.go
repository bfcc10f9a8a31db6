package main

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"example.com/troupe-go/internal/troupe"
	pb "example.com/troupe-go/troupepb"
)

// callTimeout is each call's deadline; it reaches the actor's turn as
// Turn.deadline_unix_ms and bounds the calls the turn makes.
const callTimeout = 5 * time.Second

// client wraps ActorClient with the JSON mapping and error trailers.
type client struct {
	api pb.ActorClientClient
	// traceparent is sent as a W3C header on every call, so the turns (and
	// the nested call of transfer) carry one trace (docs/observability.md).
	traceparent string
}

// callOpts are the optional parts of an Invoke.
type callOpts struct {
	metadata map[string]string
	key      string // idempotency key
	newKey   bool   // first attempt with a key we made (InvokeRequest.new_key)
}

// invoke calls typ/id.method with keyword arguments and decodes the JSON
// result into out (nil: ignore it). A failure is a *troupe.CallError.
func (c *client) invoke(id, method string, kwargs map[string]any, out any, o callOpts) error {
	payload, err := troupe.Kwargs(kwargs)
	if err != nil {
		return err
	}
	ctx, cancel := c.ctx()
	defer cancel()
	req := &pb.InvokeRequest{
		Actor:          &pb.ActorRef{Type: "account", Id: id},
		Method:         method,
		Payload:        payload,
		Metadata:       o.metadata,
		IdempotencyKey: o.key,
		NewKey:         o.newKey,
	}
	if o.key != "" {
		// We resend this key only within this run: keep its answer a few
		// minutes, not the daemon's whole retention (docs/delivery.md).
		req.KeyRetentionMs = uint64((2 * time.Minute).Milliseconds())
	}
	var trailer metadata.MD
	resp, err := c.api.Invoke(ctx, req, grpc.Trailer(&trailer))
	if err != nil {
		return troupe.NewCallError(err, trailer)
	}
	return decodeInto(resp.GetPayload(), out)
}

// tell sends a durable, keyed tell: stored before it is acknowledged.
func (c *client) tell(id, method string, kwargs map[string]any) error {
	payload, err := troupe.Kwargs(kwargs)
	if err != nil {
		return err
	}
	ctx, cancel := c.ctx()
	defer cancel()
	var trailer metadata.MD
	_, err = c.api.Tell(ctx, &pb.TellRequest{
		Actor:          &pb.ActorRef{Type: "account", Id: id},
		Method:         method,
		Payload:        payload,
		Delivery:       pb.Delivery_DELIVERY_DURABLE,
		IdempotencyKey: troupe.NewKey(),
		NewKey:         true,
		KeyRetentionMs: uint64((2 * time.Minute).Milliseconds()),
	}, grpc.Trailer(&trailer))
	if err != nil {
		return troupe.NewCallError(err, trailer)
	}
	return nil
}

// state reads an actor's state without running a turn; values are JSON.
func (c *client) state(id string) (map[string]any, bool, error) {
	ctx, cancel := c.ctx()
	defer cancel()
	var trailer metadata.MD
	resp, err := c.api.GetState(ctx, &pb.GetStateRequest{Actor: &pb.ActorRef{Type: "account", Id: id}}, grpc.Trailer(&trailer))
	if err != nil {
		return nil, false, troupe.NewCallError(err, trailer)
	}
	out := map[string]any{}
	for k, v := range resp.GetEntries() {
		value, err := troupe.DecodeJSON(v)
		if err != nil {
			return nil, false, fmt.Errorf("state key %q: %w", k, err)
		}
		out[k] = value
	}
	return out, resp.GetActive(), nil
}

func (c *client) balance(id string) (int64, error) {
	var n int64
	err := c.invoke(id, "balance", nil, &n, callOpts{})
	return n, err
}

func (c *client) ctx() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	return metadata.AppendToOutgoingContext(ctx, "traceparent", c.traceparent), cancel
}

// decodeInto decodes a JSON result into out via encoding/json.
func decodeInto(p *pb.Payload, out any) error {
	if out == nil {
		return nil
	}
	return troupe.DecodeResultInto(p, out)
}

// poll asks until check is true or the time is up: the daemon has real time
// only, so a tell or a reminder is awaited, not slept for.
func poll(within time.Duration, check func() (bool, error)) error {
	end := time.Now().Add(within)
	for {
		ok, err := check()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("not seen within %v", within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Command client calls the Go-hosted "account" actors through the client
// API (proto/troupe/v1/client.proto) and checks every answer: it exits 1,
// saying what differed, on any mismatch.
//
//	TROUPE_ADDR       daemon address (default 127.0.0.1:7420)
//	TROUPE_API_TOKEN  API token, when the daemon requires one
//
// It reads the starting balances first, so it passes again on a daemon that
// kept the accounts of an earlier run.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"example.com/troupe-go/internal/troupe"
	pb "example.com/troupe-go/troupepb"
)

func main() {
	conn, err := troupe.Dial(troupe.Addr(), troupe.Token("TROUPE_API_TOKEN"), 16<<20)
	if err != nil {
		fail(err)
	}
	defer conn.Close()
	c := &client{api: pb.NewActorClientClient(conn), traceparent: newTraceparent()}
	if err := scenario(c); err != nil {
		conn.Close()
		fail(err)
	}
	fmt.Println("client: all checks passed")
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "client: FAILED: %v\n", err)
	os.Exit(1)
}

func scenario(c *client) error {
	run := troupe.NewKey()[:8] // tells this run's idempotency keys from earlier runs'
	a1, err := c.balance("a1")
	if err != nil {
		return fmt.Errorf("balance a1: %w", err)
	}
	a2, err := c.balance("a2")
	if err != nil {
		return fmt.Errorf("balance a2: %w", err)
	}
	st, _, err := c.state("a1")
	if err != nil {
		return fmt.Errorf("state a1: %w", err)
	}
	statements := number(st["statements"])
	fmt.Printf("start: a1=%d a2=%d statements(a1)=%d\n", a1, a2, statements)

	// Deposits, one with call metadata.
	var got int64
	if err := c.invoke("a1", "deposit", map[string]any{"amount": 100}, &got, callOpts{metadata: map[string]string{"request-id": "dep-" + run}}); err != nil {
		return fmt.Errorf("deposit a1 100: %w", err)
	}
	if err := expect(got == a1+100, "deposit a1 100 returned %d, want %d", got, a1+100); err != nil {
		return err
	}
	fmt.Printf("deposit a1 100 -> %d\n", got)

	// An idempotency key: the retry gets the recorded answer, the money
	// moves once (docs/delivery.md, "Idempotency keys").
	key := "go-demo-deposit-" + run
	var first, retry int64
	if err := c.invoke("a1", "deposit", map[string]any{"amount": 50}, &first, callOpts{key: key, newKey: true}); err != nil {
		return fmt.Errorf("keyed deposit: %w", err)
	}
	if err := c.invoke("a1", "deposit", map[string]any{"amount": 50}, &retry, callOpts{key: key}); err != nil {
		return fmt.Errorf("keyed deposit, retry: %w", err)
	}
	now, err := c.balance("a1")
	if err != nil {
		return fmt.Errorf("balance a1: %w", err)
	}
	if err := expect(first == a1+150 && retry == first && now == first,
		"keyed deposit: first %d, retry %d, balance %d; want %d for all three", first, retry, now, a1+150); err != nil {
		return err
	}
	fmt.Printf("keyed deposit a1 50, sent twice with key %s -> %d and %d (replayed), balance %d\n", key, first, retry, now)
	a1 = now

	if err := failures(c, a1); err != nil {
		return err
	}

	// A transfer: a1's turn calls a2.deposit with its chain, metadata, trace
	// and a deadline within this call's.
	var tr struct {
		Balance   int64 `json:"balance"`
		ToBalance int64 `json:"to_balance"`
	}
	if err := c.invoke("a1", "transfer", map[string]any{"to": "a2", "amount": 30}, &tr, callOpts{metadata: map[string]string{"request-id": "xfer-" + run}}); err != nil {
		return fmt.Errorf("transfer a1->a2 30: %w", err)
	}
	if err := expect(tr.Balance == a1-30 && tr.ToBalance == a2+30, "transfer returned a1=%d a2=%d, want %d and %d", tr.Balance, tr.ToBalance, a1-30, a2+30); err != nil {
		return err
	}
	fmt.Printf("transfer a1->a2 30 -> a1=%d a2=%d\n", tr.Balance, tr.ToBalance)
	a1, a2 = a1-30, a2+30

	// A transfer whose nested call fails: the whole turn fails, so its
	// withdrawal is discarded.
	err = c.invoke("a1", "transfer", map[string]any{"to": "", "amount": 10}, nil, callOpts{})
	if err := expectRemote(err, "InvalidArgument", "raised"); err != nil {
		return fmt.Errorf("transfer to an empty id: %w", err)
	}
	if now, err := c.balance("a1"); err != nil || now != a1 {
		return fmt.Errorf("after the failed transfer a1 has %d (err %v), want %d unchanged", now, err, a1)
	}
	fmt.Printf("transfer a1->\"\" failed (%s), a1 still %d\n", firstLine(err.Error()), a1)

	// A durable tell: acknowledged once stored, run soon after.
	if err := c.tell("a2", "deposit", map[string]any{"amount": 5}); err != nil {
		return fmt.Errorf("tell a2 deposit: %w", err)
	}
	if err := poll(5*time.Second, func() (bool, error) { n, err := c.balance("a2"); return n == a2+5, err }); err != nil {
		return fmt.Errorf("the told deposit of 5 to a2 (want balance %d): %w", a2+5, err)
	}
	a2 += 5
	fmt.Printf("tell a2 deposit 5 -> a2=%d\n", a2)

	// A reminder set from inside a turn; its REMINDER turn counts a statement.
	var sched struct {
		Reminder string `json:"reminder"`
		NextDue  int64  `json:"next_due_unix_ms"`
	}
	if err := c.invoke("a1", "schedule_statement", map[string]any{"due": "1s"}, &sched, callOpts{}); err != nil {
		return fmt.Errorf("schedule_statement: %w", err)
	}
	due := time.UnixMilli(sched.NextDue)
	if err := expect(sched.Reminder == "statement" && time.Until(due) < 5*time.Second, "schedule_statement returned %+v", sched); err != nil {
		return err
	}
	fmt.Printf("schedule_statement a1 -> reminder %q due %s\n", sched.Reminder, due.UTC().Format(time.RFC3339Nano))
	var state map[string]any
	if err := poll(10*time.Second, func() (bool, error) {
		s, _, err := c.state("a1")
		state = s
		return number(s["statements"]) == statements+1, err
	}); err != nil {
		return fmt.Errorf("statement reminder (want statements %d, state %v): %w", statements+1, state, err)
	}

	// The state through the client API, as JSON values.
	state, active, err := c.state("a1")
	if err != nil {
		return fmt.Errorf("state a1: %w", err)
	}
	if err := expect(number(state["balance"]) == a1 && number(state["statements"]) == statements+1,
		"state of a1 is %v, want balance %d and statements %d", state, a1, statements+1); err != nil {
		return err
	}
	js, _ := json.Marshal(state)
	fmt.Printf("state a1 (active %v): %s\n", active, js)
	return nil
}

// failures checks the three failure kinds and prints what the caller sees.
func failures(c *client, a1 int64) error {
	err := c.invoke("a1", "withdraw", map[string]any{"amount": a1 + 1000}, nil, callOpts{})
	if err := expectRemote(err, "InsufficientFunds", "raised"); err != nil {
		return fmt.Errorf("withdraw too much: %w", err)
	}
	ce, _ := troupe.IsCallError(err)
	if !strings.Contains(ce.Details, "main.withdraw") {
		return fmt.Errorf("withdraw too much: the error-details trailer does not show main.withdraw: %q", ce.Details)
	}
	fmt.Printf("withdraw a1 %d failed as expected:\n  status %s\n  type    %s\n  message %s\n  kind    %s\n  details\n    %s\n",
		a1+1000, ce.Code, ce.RemoteType, ce.Message, ce.Kind, strings.ReplaceAll(ce.Details, "\n", "\n    "))

	err = c.invoke("a1", "deposit", map[string]any{"amount": "lots"}, nil, callOpts{})
	if err := expectRemote(err, "", "bad-arguments"); err != nil {
		return fmt.Errorf("deposit \"lots\": %w", err)
	}
	fmt.Printf("deposit a1 \"lots\" -> %s\n", err)
	err = c.invoke("a1", "close", nil, nil, callOpts{})
	if err := expectRemote(err, "", "no-such-method"); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	fmt.Printf("close a1 -> %s\n", err)
	return nil
}

// expectRemote checks that err is the actor's failure of that type
// (any type when "") and kind.
func expectRemote(err error, typ, kind string) error {
	ce, ok := troupe.IsCallError(err)
	switch {
	case err == nil:
		return fmt.Errorf("succeeded, want the actor's %s error", kind)
	case !ok || !ce.Remote():
		return fmt.Errorf("failed with %v, want the actor's %s error", err, kind)
	case typ != "" && ce.RemoteType != typ || ce.Kind != kind:
		return fmt.Errorf("failed with type %q kind %q, want %q kind %q", ce.RemoteType, ce.Kind, typ, kind)
	}
	return nil
}

func expect(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}

// number reads a JSON number decoded as json.Number (absent: 0; not a
// whole number: -1, which no check expects).
func number(v any) int64 {
	if v == nil {
		return 0
	}
	n, ok := v.(json.Number)
	if !ok {
		return -1
	}
	i, err := n.Int64()
	if err != nil {
		return -1
	}
	return i
}

func firstLine(s string) string { return strings.SplitN(s, "\n", 2)[0] }

// newTraceparent starts a W3C trace (sampled) for this run's calls.
func newTraceparent() string {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return ""
	}
	return "00-" + hex.EncodeToString(b[:16]) + "-" + hex.EncodeToString(b[16:]) + "-01"
}

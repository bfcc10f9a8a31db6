// Command host is a Troupe app written in Go against the published gRPC API
// (proto/troupe/v1/app.proto): it hosts the actor type "account", a bank
// account, for a `troupe serve` daemon.
//
//	TROUPE_ADDR       daemon address (default 127.0.0.1:7420)
//	TROUPE_APP_TOKEN  app token, when the daemon requires one (docs/security.md)
//
// It prints "registered" once the daemon accepted the type, re-attaches with
// backoff when the stream breaks, and stops cleanly on SIGINT/SIGTERM.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"time"

	"example.com/troupe-go/internal/troupe"
)

const (
	appName = "go-account-host"
	// sdkName goes to Register.sdk, for the daemon's diagnostics.
	sdkName = "troupe-go-example/0.1.0"
	// apiVersion is the app API version this code speaks (Register.api_version).
	apiVersion = 1
	// maxReceiveBytes is both our gRPC receive limit and what we declare in
	// Register.max_receive_bytes, so the daemon never sends a message we
	// would refuse (it fails that call with RESOURCE_EXHAUSTED instead).
	maxReceiveBytes = 16 << 20
	// drainTimeout bounds how long a stop waits for running turns.
	drainTimeout = 5 * time.Second
)

func main() {
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	log.SetPrefix("host: ")

	addr := troupe.Addr()
	// An app presents the app token; it also lets the app's actors call
	// others through ActorClient (docs/security.md, the credential table).
	conn, err := troupe.Dial(addr, troupe.Token("TROUPE_APP_TOKEN"), maxReceiveBytes)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	err = attachForever(ctx, newApp(conn))
	if err != nil {
		log.Printf("stopped: %v", err)
		os.Exit(1)
	}
	log.Printf("stopped")
}

// errPermanent marks failures a reconnect cannot fix (a version mismatch, a
// refused token): the host stops instead of retrying forever.
type errPermanent struct{ error }

// attachForever keeps one app stream attached until ctx ends: the daemon may
// restart or drop the stream, and calls queued meanwhile wait --host-wait
// (10 s by default) for the type to come back.
func attachForever(ctx context.Context, a *app) error {
	const first, ceiling = 200 * time.Millisecond, 5 * time.Second
	backoff := first
	for attempt := 1; ; attempt++ {
		registered, err := a.session(ctx)
		if ctx.Err() != nil {
			return nil // asked to stop; session drained what ran
		}
		var perm errPermanent
		if errors.As(err, &perm) {
			return perm.error
		}
		if registered {
			// It worked for a while: the next failure starts the backoff
			// anew instead of waiting the ceiling after one blip.
			backoff, attempt = first, 1
		}
		// Jitter (x0.8-1.2) keeps many hosts from re-dialling in step.
		pause := time.Duration(float64(backoff) * (0.8 + 0.4*rand.Float64()))
		log.Printf("stream to %s ended (%v); re-attaching in %v (attempt %d)", troupe.Addr(), err, pause.Round(time.Millisecond), attempt)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
		backoff = min(backoff*2, ceiling)
	}
}

// announce prints the line run_demo.sh waits for, on stdout, unbuffered.
func announce(format string, args ...any) {
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

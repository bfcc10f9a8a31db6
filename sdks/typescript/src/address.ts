// Where the daemon is and how channels to it are configured.
import * as grpc from "@grpc/grpc-js";

export const DEFAULT_ADDRESS = "127.0.0.1:7420";
export const SDK_VERSION = "0.1.0";
export const SDK_NAME = `troupe-typescript/${SDK_VERSION}`;

/** Channel options shared by Client and App (same values as the Python SDK). */
export const CHANNEL_OPTIONS: grpc.ChannelOptions = {
  // The daemon enforces payload limits with a clear status; don't let the
  // client's 4 MiB receive default hide that behind its own error.
  "grpc.max_receive_message_length": 64 * 1024 * 1024,
  "grpc.max_send_message_length": 64 * 1024 * 1024,
  // gRPC's default reconnect backoff grows to 2 minutes; a sidecar on loopback
  // should be picked up again within a couple of seconds.
  "grpc.initial_reconnect_backoff_ms": 100,
  "grpc.min_reconnect_backoff_ms": 100,
  "grpc.max_reconnect_backoff_ms": 2000,
};

/** The explicit address, else $TROUPE_ADDR, else 127.0.0.1:7420. */
export function resolveAddress(address?: string): string {
  const chosen = address ?? process.env["TROUPE_ADDR"] ?? "";
  return chosen === "" ? DEFAULT_ADDRESS : chosen;
}

/** The gRPC target for an address (a leading http:// is dropped). */
export function grpcTarget(address: string): string {
  return address.startsWith("http://") ? address.slice("http://".length) : address;
}

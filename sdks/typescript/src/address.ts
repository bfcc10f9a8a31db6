// Where the daemon is and how channels to it are configured.
import * as grpc from "@grpc/grpc-js";

export const DEFAULT_ADDRESS = "127.0.0.1:7420";
/**
 * The SDK's release: package.json's version, the daemon's (the workspace
 * Cargo.toml) and the Python SDK's, which ship together (a test keeps them equal).
 * A constant because the compiled file's place relative to package.json differs
 * between the package (dist/) and the tests (build/src/).
 */
export const SDK_VERSION = "0.1.0";
export const SDK_NAME = `troupe-typescript/${SDK_VERSION}`;
/**
 * The app API version this SDK speaks (`Register.api_version` in app.proto): the
 * daemon refuses another, and the SDK refuses a daemon that answers another. Goes
 * up only with an incompatible change of the app or client protocol, together with
 * the daemon's (`troupe_proto::v1::API_VERSION`) and the Python SDK's.
 */
export const API_VERSION = 1;

/** The smallest receive limit an app may declare (the daemon refuses less: its other messages must always fit). */
export const MIN_RECEIVE_BYTES = 64 * 1024;

/** Channel options shared by Client and App (same values as the Python SDK). */
export const CHANNEL_OPTIONS: grpc.ChannelOptions = {
  // The daemon enforces payload limits with a clear status, and sends an app up
  // to twice its --max-payload-bytes (configurable) in one message; any fixed
  // receive limit here (gRPC's default is 4 MiB) would fail what the daemon
  // accepted, and on an app's stream would end the stream. So -1: no limit,
  // unless the app sets one (maxReceiveBytes) and declares it to the daemon.
  "grpc.max_receive_message_length": -1,
  "grpc.max_send_message_length": -1,
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

/** Throws a RangeError unless `maxReceiveBytes` is undefined or a limit the daemon takes. */
export function checkReceiveLimit(maxReceiveBytes: number | undefined): void {
  if (maxReceiveBytes === undefined) return;
  if (!Number.isSafeInteger(maxReceiveBytes)) {
    throw new RangeError(`maxReceiveBytes must be a whole number of bytes or undefined, not ${String(maxReceiveBytes)}`);
  }
  if (maxReceiveBytes < MIN_RECEIVE_BYTES) {
    throw new RangeError(
      `maxReceiveBytes=${String(maxReceiveBytes)} is below the smallest the daemon accepts (${String(MIN_RECEIVE_BYTES)}); ` +
        `pass at least ${String(MIN_RECEIVE_BYTES)}, or leave it out for no limit`,
    );
  }
}

/** CHANNEL_OPTIONS with one received message bounded by `maxReceiveBytes` (undefined: no bound). */
export function channelOptions(maxReceiveBytes: number | undefined): grpc.ChannelOptions {
  return maxReceiveBytes === undefined ? CHANNEL_OPTIONS : { ...CHANNEL_OPTIONS, "grpc.max_receive_message_length": maxReceiveBytes };
}

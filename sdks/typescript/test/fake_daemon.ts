// Test support: the daemon's side of one Attach stream, on a grpc-js server, for
// unit tests of the app stream without the daemon.
import * as grpc from "@grpc/grpc-js";
import { type AppMessage, AppHostService, type DaemonMessage, type Register } from "../src/gen/troupe/v1/app.js";
import { type ActorClass, API_VERSION, App, type Logger } from "../src/index.js";
import { bindLoopback, within } from "./helpers.js";

/** The daemon's side of one Attach stream: keeps Register, and every later write of the app as it came. */
export class FakeDaemon {
  readonly #server = new grpc.Server();
  #stream: grpc.ServerDuplexStream<AppMessage, DaemonMessage> | undefined;
  readonly #writes: AppMessage[] = [];
  #wake: (() => void) | undefined;
  register: Register | undefined;
  port = 0;

  async start(): Promise<void> {
    this.#server.addService(AppHostService, {
      attach: (stream: grpc.ServerDuplexStream<AppMessage, DaemonMessage>) => {
        this.#stream = stream;
        stream.on("data", (msg: AppMessage) => {
          if (msg.kind?.$case === "register") {
            this.register = msg.kind.value;
            stream.write({
              kind: { $case: "registered", value: { types: [], daemonVersion: "fake", acceptsBatches: true, apiVersion: API_VERSION, acceptsParts: false } },
            });
            return;
          }
          this.#writes.push(msg);
          this.#wake?.();
        });
        stream.on("error", () => undefined);
      },
    });
    this.port = await bindLoopback(this.#server);
  }

  send(msg: DaemonMessage): void {
    if (this.#stream === undefined) throw new Error("no app attached");
    this.#stream.write(msg);
  }

  /** The app's writes (one entry per message on the stream) until they hold `n` answers; batches count their answers. */
  async writes(n: number): Promise<AppMessage[]> {
    const taken: AppMessage[] = [];
    let answers = 0;
    while (answers < n) {
      const msg = this.#writes.shift();
      if (msg === undefined) {
        await within(
          5_000,
          `${String(n)} answers from the app (got ${String(answers)})`,
          new Promise<void>((resolve) => {
            this.#wake = resolve;
          }),
        );
        continue;
      }
      taken.push(msg);
      answers += msg.kind?.$case === "batch" ? msg.kind.value.messages.length : 1;
    }
    return taken;
  }

  /** The app's next write. */
  async next(): Promise<AppMessage> {
    const [msg] = await this.writes(1);
    if (msg === undefined) throw new Error("no write from the app");
    return msg;
  }

  stop(): void {
    this.#server.forceShutdown();
  }
}

/** Starts `daemon`, then an App hosting `actors` attached to it. */
export async function attachedApp(daemon: FakeDaemon, actors: ActorClass[], appName: string, logger: Logger): Promise<App> {
  await daemon.start();
  const app = new App({ actors, address: `127.0.0.1:${String(daemon.port)}`, appName, logger });
  await app.start({ timeout: 10 });
  return app;
}

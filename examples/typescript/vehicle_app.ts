// Hosts the `vehicle` actor: one actor per bus, keeping its last position and a short history.
//
// Run with a daemon listening at $TROUPE_ADDR (default 127.0.0.1:7420):
//
//     node build/vehicle_app.js
//
// Prints "registered" once the daemon accepted the actor type; stops on Ctrl-C or SIGTERM.
import { Actor, actor, App, method } from "@troupe/sdk";

const HISTORY_LENGTH = 5;
/** A bus that reports nothing for this long is marked parked (by a durable reminder). */
const PARKED_AFTER = "10m";

/** One position fix of a bus. */
export interface Fix {
  lat: number;
  lon: number;
  ts: number;
}

interface VehicleState {
  position: Fix;
  history: Fix[];
  reports: number;
  parked: boolean;
}

/**
 * A bus on the map. State: `position` (last fix), `history` (last few fixes), `reports`,
 * `parked` (no report for PARKED_AFTER).
 */
@actor("vehicle", { idleTimeout: "5m" })
export class Vehicle extends Actor<VehicleState> {
  /** Record a position fix; returns how many fixes this bus has reported in total. */
  @method
  async report({ lat, lon, ts }: Fix): Promise<number> {
    if (!(lat >= -90 && lat <= 90 && lon >= -180 && lon <= 180)) {
      throw new RangeError(`position out of range: lat=${lat} lon=${lon}`);
    }
    const fix = { lat, lon, ts };
    const last = this.state.get("position");
    let history: Fix[];
    if (last !== undefined && ts < last.ts) {
      // A late, out-of-order fix belongs in the history but must not move the bus back.
      history = [...this.state.get("history", []), fix].sort((a, b) => a.ts - b.ts);
    } else {
      this.state.set("position", fix);
      history = [...this.state.get("history", []), fix];
      // For whoever watches the buses move (client.watchType("vehicle")).
      this.ctx.publish(fix);
    }
    this.state.set("history", history.slice(-HISTORY_LENGTH));
    const reports = this.state.get("reports", 0) + 1;
    this.state.set("reports", reports);
    this.state.set("parked", false);
    // Re-arm the "parked" reminder: setting it again replaces the pending one. It is
    // durable, so it fires even if the actor was deactivated or the daemon restarted.
    await this.ctx.setReminder("parked", { due: PARKED_AFTER, data: { last_ts: ts } });
    return reports;
  }

  /** A reminder fired: here only "parked", PARKED_AFTER after the last report. */
  override onReminder(name: string): void {
    if (name === "parked") this.state.set("parked", true);
  }

  /** The latest fix, or null before the first report. */
  @method({ readonly: true })
  position(): Fix | null {
    return this.state.get("position") ?? null;
  }

  /** The last few fixes, oldest first. */
  @method({ readonly: true })
  history(): Fix[] {
    return this.state.get("history", []);
  }
}

async function main(): Promise<void> {
  const app = new App({ actors: [Vehicle], appName: "vehicle-app" });
  const running = app.runForever(); // returns on SIGINT / SIGTERM
  await app.waitRegistered();
  console.log(`registered vehicle with the daemon at ${app.address}`);
  await running;
}

// client.ts imports only the types of this module, so this runs only as a program.
await main();

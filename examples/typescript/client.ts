// Streams positions for a few buses into their `vehicle` actors, then prints a summary.
//
// Run with the daemon and vehicle_app.js running:
//
//     node build/client.js
import { ActorError, Client, kwargs, NotFound, Unavailable } from "@troupe/sdk";
import type { Fix, Vehicle } from "./vehicle_app.js";

const BUSES = ["bus-7", "bus-12", "bus-31", "bus-44"];
const FIXES_PER_BUS = 8;
// A small loop in the centre of Zurich; each bus starts at a different point on it.
const CENTRE = [47.3769, 8.5417] as const;
const RADIUS_DEG = 0.01;

const round6 = (x: number): number => Math.round(x * 1e6) / 1e6;

/** The app may still be registering: retry NotFound/Unavailable for a few seconds. */
async function waitForHost(client: Client, seconds = 10): Promise<void> {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    try {
      await client.actor<Vehicle>("vehicle", BUSES[0] ?? "bus-7").call("position");
      return;
    } catch (e) {
      if (!(e instanceof NotFound || e instanceof Unavailable) || Date.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

/** Send this bus's fixes in order; different buses are driven concurrently. */
async function drive(client: Client, bus: string, index: number): Promise<number> {
  const vehicle = client.actor<Vehicle>("vehicle", bus);
  const start = Date.now() / 1000;
  let reports = 0;
  for (let step = 0; step < FIXES_PER_BUS; step++) {
    const angle = 2 * Math.PI * (index / BUSES.length + step / 40);
    const lat = round6(CENTRE[0] + RADIUS_DEG * Math.sin(angle));
    const lon = round6(CENTRE[1] + RADIUS_DEG * Math.cos(angle));
    // kwargs(): keyword arguments, so this client also drives the Python app (report(lat=, lon=, ts=)).
    reports = await vehicle.call("report", kwargs({ lat, lon, ts: start + step * 15 }));
  }
  return reports;
}

/** Equirectangular approximation; plenty for a few hundred metres. */
function distanceM(a: Fix, b: Fix): number {
  const rad = (d: number): number => (d * Math.PI) / 180;
  const meanLat = rad((a.lat + b.lat) / 2);
  const dx = rad(b.lon - a.lon) * Math.cos(meanLat);
  const dy = rad(b.lat - a.lat);
  return 6_371_000 * Math.hypot(dx, dy);
}

const pad = (s: string | number, n: number): string => String(s).padStart(n);

async function main(): Promise<void> {
  const client = new Client({ timeout: "10s" });
  try {
    await waitForHost(client);
    // Every bus's moves, as they happen, from one watch of the whole type: what a
    // map on a screen would redraw from.
    const events = await client.watchType<Fix>("vehicle");
    const moves = new Map<string, number>();
    const watching = (async (): Promise<void> => {
      let seen = 0;
      for await (const event of events) {
        moves.set(event.actorId, (moves.get(event.actorId) ?? 0) + 1);
        if (++seen === BUSES.length * FIXES_PER_BUS) break;
      }
    })();
    const totals = await Promise.all(BUSES.map((bus, i) => drive(client, bus, i)));
    const late = setTimeout(() => events.close(), 10_000);
    await watching;
    clearTimeout(late);
    const seen = [...moves.values()].reduce((a, b) => a + b, 0);
    console.log(`live map: ${seen} moves of ${moves.size} buses watched as they happened (client.watchType)`);

    console.log(`${"bus".padEnd(8)} ${pad("reports", 7)} ${pad("last position", 22)} ${pad("last leg", 9)} ${pad("history", 8)}`);
    for (const [i, bus] of BUSES.entries()) {
      const vehicle = client.actor<Vehicle>("vehicle", bus);
      const [position, history] = await Promise.all([vehicle.call("position"), vehicle.call("history")]);
      const prev = history.at(-2);
      const last = history.at(-1);
      const leg = prev !== undefined && last !== undefined ? distanceM(prev, last) : 0;
      const where = position === null ? "-" : `${position.lat.toFixed(5)}, ${position.lon.toFixed(5)}`;
      console.log(`${bus.padEnd(8)} ${pad(totals[i] ?? 0, 7)} ${pad(where, 22)} ${pad(leg.toFixed(0), 7)} m ${pad(history.length, 8)}`);
    }

    try {
      await client.actor<Vehicle>("vehicle", "bus-7").call("report", kwargs({ lat: 123.0, lon: 0.0, ts: Date.now() / 1000 }));
    } catch (e) {
      if (!(e instanceof ActorError)) throw e;
      console.log(`bad fix refused by the actor: ${e.remoteType}: ${e.message}`);
    }

    const stored = await client.getState<{ reports: number }>("vehicle", "bus-7", ["reports"]);
    console.log(`stored state of bus-7: reports=${stored.reports ?? "?"}`);

    // Each report re-armed the bus's durable "parked" reminder.
    const parked = (await client.listReminders({ actorType: "vehicle" })).filter((r) => r.name === "parked");
    const firstDue = Math.min(...parked.map((r) => r.nextDue.getTime()));
    console.log(`parked reminders: ${parked.length}, first due in ${Math.round((firstDue - Date.now()) / 60_000)} min`);
  } finally {
    client.close();
  }
}

await main();

"""Traffic generator: rentals start (insert), end (update) or are cancelled (delete).

Each change is one transaction touching the rental and its bike, as a real application
would, so Debezium sees ordinary multi-table transactions. Which change comes next, which
bike and which station are drawn from a random generator seeded by the caller and from
the database's current state read in a fixed order: the same seed on the same starting
state gives the same sequence of changes (timestamps and prices follow the wall clock).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import psycopg

from settings.model import RentalsSettings
from settings.report import Report

START, END, CANCEL = "start", "end", "cancel"
# At most this share of the bikes is out at once, so ends keep pace with starts.
MAX_OUT_SHARE = 0.3
# A rental costs a base fee plus a fee per started minute.
BASE_FEE_CENTS, MINUTE_FEE_CENTS = 100, 15


@dataclass
class TrafficCounts:
    started: int = 0
    ended: int = 0
    cancelled: int = 0

    @property
    def total(self) -> int:
        return self.started + self.ended + self.cancelled

    def summary(self) -> str:
        return (f"{self.total} change(s): {self.started} started (insert), "
                f"{self.ended} ended (update), {self.cancelled} cancelled (delete)")


class TrafficGenerator:
    """Makes one change per `step()` against the rentals database."""

    def __init__(self, conn: psycopg.Connection, config: RentalsSettings, seed: int):
        self.conn = conn
        self.config = config
        self.rng = random.Random(seed)
        self.counts = TrafficCounts()

    def _ids(self, query: str) -> list[str] | list[int]:
        return [row[0] for row in self.conn.execute(query).fetchall()]

    def choose(self, active: int, available: int) -> str:
        """The next kind of change, given how many rentals are active and bikes free."""
        roll = self.rng.random()
        can_start = available > 0 and active < MAX_OUT_SHARE * self.config.bikes
        if active == 0 or (can_start and roll < 0.5):
            return START
        return CANCEL if self.rng.random() < self.config.cancel_share else END

    def step(self) -> tuple[str, int] | None:
        """Make one change in one transaction; None if there is nothing to change."""
        with self.conn.transaction():
            active = self._ids("SELECT rental_id FROM rentals WHERE status = 'active' "
                               "ORDER BY rental_id FOR UPDATE")
            bikes = self._ids("SELECT bike_id FROM bikes WHERE status = 'available' "
                              "ORDER BY bike_id")
            change = self.choose(len(active), len(bikes))
            if change == START:
                if not bikes:
                    return None
                rental_id = self._start(str(self.rng.choice(bikes)))
                self.counts.started += 1
            elif change == END:
                rental_id = int(self.rng.choice(active))
                self._end(rental_id, f"station-{self.rng.randint(1, self.config.stations)}")
                self.counts.ended += 1
            else:
                rental_id = int(self.rng.choice(active))
                self._cancel(rental_id)
                self.counts.cancelled += 1
        return change, rental_id

    def _start(self, bike: str) -> int:
        row = self.conn.execute(
            "INSERT INTO rentals (bike_id, start_station_id, started_at, status) "
            "SELECT bike_id, station_id, now(), 'active' FROM bikes WHERE bike_id = %s "
            "RETURNING rental_id", (bike,)).fetchone()
        assert row is not None, f"bike {bike} vanished"
        self.conn.execute("UPDATE bikes SET status = 'in_use', station_id = NULL "
                          "WHERE bike_id = %s", (bike,))
        return int(row[0])

    def _end(self, rental_id: int, end_station: str) -> None:
        self.conn.execute(
            "UPDATE rentals SET status = 'completed', end_station_id = %s, "
            "ended_at = greatest(now(), started_at), "
            "price_cents = %s + %s * ceil(extract(epoch FROM now() - started_at) / 60)::int "
            "WHERE rental_id = %s",
            (end_station, BASE_FEE_CENTS, MINUTE_FEE_CENTS, rental_id))
        self.conn.execute(
            "UPDATE bikes SET status = 'available', station_id = %s "
            "WHERE bike_id = (SELECT bike_id FROM rentals WHERE rental_id = %s)",
            (end_station, rental_id))

    def _cancel(self, rental_id: int) -> None:
        row = self.conn.execute(
            "DELETE FROM rentals WHERE rental_id = %s RETURNING bike_id, start_station_id",
            (rental_id,)).fetchone()
        assert row is not None, f"rental {rental_id} vanished"
        self.conn.execute("UPDATE bikes SET status = 'available', station_id = %s "
                          "WHERE bike_id = %s", (row[1], row[0]))


def run_traffic(conn: psycopg.Connection, config: RentalsSettings, *, rate: float,
                seed: int, duration: float | None = None, events: int | None = None,
                report: Report | None = None, progress_every: float = 5.0) -> TrafficCounts:
    """Make changes at `rate` per second until `duration` seconds or `events` changes.

    With neither limit it runs until interrupted; Ctrl-C (KeyboardInterrupt) is caught
    here: the change in flight is rolled back whole and the counts so far are returned.
    """
    bikes = conn.execute("SELECT count(*) FROM bikes").fetchone()
    if not bikes or not bikes[0]:
        raise ValueError("the rentals database has no bikes: run `lakehouse rentals seed`")
    generator = TrafficGenerator(conn, config, seed)
    began = time.monotonic()
    last_report = began
    made = 0
    try:
        while events is None or made < events:
            now = time.monotonic()
            if duration is not None and now - began >= duration:
                break
            due = began + made / rate
            if due > now:
                time.sleep(due - now)
            if generator.step() is not None:
                made += 1
            else:  # every bike is out or in maintenance: wait for the next slot
                time.sleep(1 / rate)
            if report and time.monotonic() - last_report >= progress_every:
                last_report = time.monotonic()
                report(f"rentals traffic: {generator.counts.summary()}")
    except KeyboardInterrupt:
        if report:
            report("rentals traffic: interrupted (a change in flight, if any, was rolled back)")
    return generator.counts

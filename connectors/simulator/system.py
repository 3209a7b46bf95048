"""A simulated bike-sharing system whose state advances in ticks, deterministic for a seed.

Each tick some docked bikes are rented (they vanish from the feeds, as in real GBFS),
riding bikes are returned to a station or parked free-floating, and now and then a bike
breaks or a station stops renting. The same seed and tick count always give the same state.

Besides the docked stations there is one virtual station (GBFS `is_virtual_station`: a
marked zone without docks), so feeds carry a station without capacity and without
num_docks_available. The simulated riders return bikes to docked stations only.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

# Geneva: the localized station names come in English and French.
CENTER_LAT = 46.2044
CENTER_LON = 6.1432
SYSTEM_ID = "lakeside"
LANGUAGES = ("en", "fr")
VEHICLE_TYPES = (
    {"vehicle_type_id": "classic", "form_factor": "bicycle", "propulsion_type": "human"},
    {"vehicle_type_id": "ebike", "form_factor": "bicycle", "propulsion_type": "electric_assist",
     "max_range_meters": 60000},
)
_PLACES = (
    ("Harbour", "du Port"), ("Market Square", "de la Place du Marché"),
    ("Old Town", "de la Vieille Ville"), ("Station Square", "de la Gare"),
    ("University", "de l'Université"), ("Lakeshore", "des Quais"),
    ("Botanical Garden", "du Jardin Botanique"), ("Cathedral", "de la Cathédrale"),
    ("Museum", "du Musée"), ("Stadium", "du Stade"), ("Hospital", "de l'Hôpital"),
    ("Library", "de la Bibliothèque"), ("Town Hall", "de l'Hôtel de Ville"),
    ("Park", "du Parc"), ("Bridge", "du Pont"), ("Fountain", "de la Fontaine"),
    ("Theatre", "du Théâtre"), ("Airport Road", "de la Route de l'Aéroport"),
    ("Riverside", "des Rives"), ("Castle", "du Château"), ("Lighthouse", "du Phare"),
    ("Conference Centre", "du Centre de Congrès"), ("Flower Clock", "de l'Horloge Fleurie"),
    ("Hill Top", "du Sommet"), ("Vineyard", "des Vignes"), ("Ferry Pier", "du Débarcadère"),
)


@dataclass
class Station:
    station_id: str
    names: dict[str, str]
    short_name: str
    lat: float
    lon: float
    capacity: int | None  # None: a virtual station, without docks
    address: str
    region_id: str
    is_installed: bool = True
    is_renting: bool = True
    is_returning: bool = True
    last_reported: int = 0

    @property
    def is_virtual(self) -> bool:
        return self.capacity is None


@dataclass
class Vehicle:
    vehicle_id: str
    vehicle_type_id: str
    station_id: str | None = None
    lat: float | None = None
    lon: float | None = None
    riding: bool = False
    is_reserved: bool = False
    is_disabled: bool = False
    current_range_meters: float | None = None
    last_reported: int = 0


@dataclass
class BikeSystem:
    """State of the system at `now` (epoch seconds); `advance` moves it one tick forward."""

    seed: int
    start_time: int
    step_seconds: int = 60
    station_count: int = 24
    vehicle_count: int = 48
    ticks: int = 0
    stations: list[Station] = field(default_factory=list)
    vehicles: list[Vehicle] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._build()

    @property
    def now(self) -> int:
        return self.start_time + self.ticks * self.step_seconds

    @property
    def info_last_updated(self) -> int:
        """Station information never changes after start, so neither does its timestamp."""
        return self.start_time

    def _build(self) -> None:
        rng = self._rng
        places = rng.sample(_PLACES, min(self.station_count, len(_PLACES)))
        # a larger system (benchmarks) numbers the places again: "Harbour 2", ...
        places += [(f"{english} {n // len(_PLACES) + 1}", f"{french} {n // len(_PLACES) + 1}")
                   for n in range(len(places), self.station_count)
                   for english, french in [_PLACES[n % len(_PLACES)]]]
        for index, (english, french) in enumerate(places):
            angle = rng.uniform(0, 2 * math.pi)
            radius = rng.uniform(0.002, 0.03)
            self.stations.append(Station(
                station_id=f"st-{index + 1:03d}",
                names={"en": f"{english}", "fr": f"Station {french}"},
                short_name=f"{index + 1:03d}",
                lat=round(CENTER_LAT + radius * math.sin(angle), 6),
                lon=round(CENTER_LON + radius * 1.4 * math.cos(angle), 6),
                capacity=rng.choice((10, 12, 15, 18, 20)),
                address=f"{rng.randint(1, 120)} {english} Street",
                region_id="center" if radius < 0.015 else "outer",
                last_reported=self.start_time,
            ))
        for index in range(self.vehicle_count):
            kind = "ebike" if index % 3 == 0 else "classic"
            vehicle = Vehicle(vehicle_id=f"bk-{index + 1:04d}", vehicle_type_id=kind,
                              last_reported=self.start_time)
            if kind == "ebike":
                vehicle.current_range_meters = float(rng.randint(5, 60) * 1000)
            if index % 6 == 5:
                self._park_free(vehicle)
            else:
                self._dock(vehicle, rng.choice(self.stations))
            self.vehicles.append(vehicle)
        # added last, outside the random draws: the docked stations and the evolution are
        # those of a system without it
        self.stations.append(Station(
            station_id=f"st-{self.station_count + 1:03d}",
            names={"en": "Lakeside Park Zone", "fr": "Zone du Parc du Lac"},
            short_name=f"{self.station_count + 1:03d}", lat=CENTER_LAT + 0.004,
            lon=CENTER_LON - 0.006, capacity=None, address="Lakeside Park",
            region_id="center", last_reported=self.start_time))

    def _docked(self, station: Station) -> list[Vehicle]:
        return [v for v in self.vehicles if v.station_id == station.station_id]

    def _docked_stations(self) -> list[Station]:
        return [s for s in self.stations if not s.is_virtual]

    def _dock(self, vehicle: Vehicle, station: Station) -> None:
        assert station.capacity is not None
        if len(self._docked(station)) >= station.capacity:
            self._park_free(vehicle)
            return
        vehicle.station_id, vehicle.lat, vehicle.lon = station.station_id, None, None
        vehicle.riding = False

    def _park_free(self, vehicle: Vehicle) -> None:
        rng = self._rng
        vehicle.station_id = None
        vehicle.lat = round(CENTER_LAT + rng.uniform(-0.03, 0.03), 6)
        vehicle.lon = round(CENTER_LON + rng.uniform(-0.04, 0.04), 6)
        vehicle.riding = False

    def station(self, station_id: str) -> Station:
        return next(s for s in self.stations if s.station_id == station_id)

    def advance(self, ticks: int = 1) -> None:
        for _ in range(ticks):
            self._tick()

    def _tick(self) -> None:
        rng = self._rng
        self.ticks += 1
        now = self.now
        touched: set[str] = set()
        for vehicle in self.vehicles:
            before = (vehicle.station_id, vehicle.lat, vehicle.riding, vehicle.is_disabled)
            if vehicle.riding:
                if rng.random() < 0.5:
                    if rng.random() < 0.8:
                        self._dock(vehicle, rng.choice(self._docked_stations()))
                    else:
                        self._park_free(vehicle)
                    if vehicle.current_range_meters is not None:
                        vehicle.current_range_meters = max(
                            1000.0, vehicle.current_range_meters - rng.randint(1, 8) * 1000)
            elif not vehicle.is_disabled and not vehicle.is_reserved and rng.random() < 0.15:
                if vehicle.station_id:
                    touched.add(vehicle.station_id)
                vehicle.station_id, vehicle.lat, vehicle.lon = None, None, None
                vehicle.riding = True
            elif rng.random() < 0.01:
                vehicle.is_disabled = not vehicle.is_disabled
            vehicle.is_reserved = (not vehicle.riding and not vehicle.is_disabled
                                   and rng.random() < 0.03)
            if (vehicle.station_id, vehicle.lat, vehicle.riding, vehicle.is_disabled) != before:
                vehicle.last_reported = now
                if vehicle.station_id:
                    touched.add(vehicle.station_id)
        for station in self._docked_stations():
            if rng.random() < 0.01:
                station.is_renting = not station.is_renting
                touched.add(station.station_id)
            if station.station_id in touched or rng.random() < 0.2:
                station.last_reported = now

    def station_counts(self, station: Station) -> dict[str, int | None]:
        """Bikes and docks of a station; docks is None for a virtual station."""
        docked = self._docked(station)
        disabled = sum(1 for v in docked if v.is_disabled)
        return {
            "bikes": len(docked) - disabled,
            "bikes_disabled": disabled,
            "docks": None if station.capacity is None else station.capacity - len(docked),
            "classic": sum(1 for v in docked
                           if not v.is_disabled and v.vehicle_type_id == "classic"),
            "ebike": sum(1 for v in docked if not v.is_disabled and v.vehicle_type_id == "ebike"),
        }

    def visible_vehicles(self) -> list[Vehicle]:
        """Vehicles a feed lists: every vehicle not out on a ride."""
        return [v for v in self.vehicles if not v.riding]

"""The SCRAM-SHA-512 credentials of the Kafka roles that log in with SCRAM (kafka.auth
sasl): the scrapers, the Connect worker and Spark.

SCRAM credentials live in the cluster's metadata, so the operator (a SASL/PLAIN user of
the brokers' own JAAS file) stores them: `lakehouse up` once the first embedded broker
answers, `lakehouse topics apply` for any cluster. Storing is an upsert: a second run
leaves each role able to log in, with the password `.env` gives it now.
"""

from __future__ import annotations

from confluent_kafka.admin import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from clients import kafka_admin
from settings import Settings
from settings.model import KAFKA_ROLES

ITERATIONS = 4096  # SCRAM-SHA-512's minimum: each login hashes this many times
TIMEOUT = 20.0


def scram_users(settings: Settings) -> list[tuple[str, str]]:
    """(user, password) of each role that logs in with SCRAM; none without kafka.auth."""
    if settings.kafka.auth == "none":
        return []
    return [settings.kafka.login(role) for role in KAFKA_ROLES
            if settings.kafka.mechanism(role) == "SCRAM-SHA-512"]


def store_scram_logins(settings: Settings) -> list[str]:
    """Store every SCRAM role's credential on the brokers (as the operator); the users."""
    users = scram_users(settings)
    if not users:
        return []
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, ITERATIONS)
    admin = kafka_admin(settings)
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, info, password.encode()) for user, password in users],
        request_timeout=TIMEOUT)
    for future in futures.values():
        future.result(TIMEOUT)
    return [user for user, _ in users]

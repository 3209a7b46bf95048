"""Kafka ACLs as code (`connectors/kafka_acls.yaml`): what each client role may do on the
brokers when they authorize (kafka.auth sasl).

A rule names topics by what the repository's files say (the topics the scraper sources or
the connectors write, the topics a bronze table stores), so a new feed or connector gets
its grants from its own files. Applying only adds: a grant the file no longer makes is
reported by `topics diff`, for the operator to remove on purpose.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from clients import kafka_admin
from connectors.topic_definitions import TOPICS_DIR, load_topic_files
from settings import Settings
from settings.model import KafkaRole

ACLS_FILE = Path(__file__).resolve().with_name("kafka_acls.yaml")
TIMEOUT = 20.0
CLUSTER = "kafka-cluster"  # the one name of Kafka's cluster resource
WRITE, READ = ("Write", "Describe"), ("Read", "Describe")  # what a producer, a reader needs

Resource = Literal["topic", "group", "transactional_id", "cluster"]
Operation = Literal["Read", "Write", "Describe", "Create", "Delete", "Alter",
                    "DescribeConfigs", "AlterConfigs", "IdempotentWrite"]
_RESOURCE_TYPES = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP,
                   "transactional_id": ResourceType.TRANSACTIONAL_ID,
                   "cluster": ResourceType.BROKER}


class AclFileError(Exception):
    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    resource: Resource
    name: str | None = None
    prefix: str | None = None
    produced_by: Literal["scraper", "kafka_connect"] | None = None
    consumed: bool = False
    operations: list[Operation]

    @model_validator(mode="after")
    def _named_one_way(self) -> Rule:
        ways = [w for w in ("name", "prefix", "produced_by") if getattr(self, w)]
        ways += ["consumed"] if self.consumed else []
        if self.resource == "cluster":
            if ways:
                raise ValueError("a cluster rule names nothing (one cluster)")
        elif len(ways) != 1:
            raise ValueError("name the resources one way: name, prefix, produced_by or "
                             "consumed")
        if (self.produced_by or self.consumed) and self.resource != "topic":
            raise ValueError("produced_by and consumed name topics")
        if not self.operations:
            raise ValueError("operations: at least one")
        return self


class AclsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    roles: dict[Literal["scrapers", "connect", "spark"], list[Rule]]


@dataclass(frozen=True, order=True)
class Grant:
    """One ALLOW ACL: `role` may do `operation` on the resource(s) of the pattern."""

    role: str
    resource: str
    pattern: str  # "literal" or "prefixed"
    name: str
    operation: str

    def binding(self) -> AclBinding:
        return AclBinding(_RESOURCE_TYPES[self.resource], self.name,
                          ResourcePatternType[self.pattern.upper()], f"User:{self.role}",
                          "*", AclOperation[_snake(self.operation)], AclPermissionType.ALLOW)

    def describe(self) -> str:
        what = self.resource if self.resource == "cluster" else (
            f"{self.resource} {self.name}{'*' if self.pattern == 'prefixed' else ''}")
        return f"User:{self.role} {self.operation} on {what}"


def _snake(operation: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation).upper()


def _camel(operation: AclOperation) -> str:
    return "".join(part.capitalize() for part in operation.name.split("_"))


def load_acls_file(path: Path = ACLS_FILE) -> AclsFile:
    """The rules, or AclFileError naming the file and field of every problem."""
    try:
        return AclsFile.model_validate(yaml.safe_load(path.read_text()))
    except yaml.YAMLError as exc:
        raise AclFileError([f"{path}: not YAML: {exc}"]) from exc
    except ValidationError as exc:
        raise AclFileError([
            f"{path}: {'.'.join(str(p) for p in e['loc']) or '(file)'}: {e['msg']}"
            for e in exc.errors()]) from exc


def consumed_topics(settings: Settings, folder: Path = TOPICS_DIR) -> list[str]:
    """Topics (as on the broker) a topic file gives a consumer: what bronze reads."""
    suffix = settings.kafka.dlq_topic_suffix
    found = []
    for _path, topic in load_topic_files(folder):
        name = settings.kafka.topic(topic.name)
        if topic.consumer:
            found.append(name)
        if topic.dead_letter is not None and topic.dead_letter.consumer:
            found.append(name + suffix)
    return found


def desired_grants(settings: Settings, path: Path = ACLS_FILE) -> list[Grant]:
    """Every grant the file makes under this profile's names."""
    from connectors.topic_producers import topic_producers

    rules = load_acls_file(path)
    places = {"topic_prefix": settings.kafka.topic_prefix,
              "connect_group": settings.connect.group_id,
              "connect_topics": settings.connect.internal_topic_prefix}
    producers = topic_producers(settings)
    grants: set[Grant] = set()
    def named(text: str, where: str) -> str:
        try:
            return text.format(**places)
        except (KeyError, IndexError, ValueError) as exc:
            raise AclFileError([f"{path}: {where}: unknown placeholder in {text!r} ({exc}); "
                                f"known: {', '.join('{' + p + '}' for p in places)}"]) from exc

    for role, role_rules in rules.roles.items():
        for index, rule in enumerate(role_rules):
            if rule.resource == "cluster":
                names = [("literal", CLUSTER)]
            elif rule.name is not None:
                names = [("literal", named(rule.name, f"roles.{role}.{index}.name"))]
            elif rule.prefix is not None:
                names = [("prefixed", named(rule.prefix, f"roles.{role}.{index}.prefix"))]
            elif rule.produced_by is not None:
                names = [("literal", t) for t, p in producers.items()
                         if p.kind == rule.produced_by]
            else:
                names = [("literal", t) for t in consumed_topics(settings)]
            grants.update(Grant(role, rule.resource, pattern, name, operation)
                          for pattern, name in names for operation in rule.operations)
    return sorted(grants)


def live_grants(admin: AdminClient, roles: set[str]) -> set[Grant]:
    """The brokers' ALLOW ACLs of `roles` (what describe_acls can express as a Grant)."""
    names = {v: k for k, v in _RESOURCE_TYPES.items()}
    found: set[Grant] = set()
    for role in sorted(roles):
        query = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY,
                                 f"User:{role}", None, AclOperation.ANY,
                                 AclPermissionType.ALLOW)
        for acl in admin.describe_acls(query, request_timeout=TIMEOUT).result(TIMEOUT):
            if acl.restype in names:
                found.add(Grant(role, names[acl.restype], acl.resource_pattern_type.name.lower(),
                                acl.name, _camel(acl.operation)))
    return found


@dataclass
class AclPlan:
    missing: list[Grant]  # the file makes them, the brokers lack them
    extra: list[Grant]  # the brokers allow a role more than the file says


def plan(settings: Settings, admin: AdminClient | None = None) -> AclPlan:
    """What apply would add, and what the brokers allow beyond the file; nothing without
    kafka.auth (brokers that authorize nobody have no ACLs to keep)."""
    if settings.kafka.auth == "none":
        return AclPlan([], [])
    wanted = set(desired_grants(settings))
    live = live_grants(admin or kafka_admin(settings), {g.role for g in wanted})
    return AclPlan(sorted(wanted - live), sorted(live - wanted))


def add_grants(settings: Settings, grants: list[Grant], admin: AdminClient | None = None
               ) -> None:
    """Create `grants` on the brokers (as the operator); an existing one is left alone."""
    if not grants or settings.kafka.auth == "none":
        return
    admin = admin or kafka_admin(settings)
    futures = admin.create_acls([g.binding() for g in grants], request_timeout=TIMEOUT)
    for future in futures.values():
        future.result(TIMEOUT)


def apply(settings: Settings) -> list[Grant]:
    """Add every missing grant of the file; the grants added."""
    admin = kafka_admin(settings)
    missing = plan(settings, admin).missing
    add_grants(settings, missing, admin)
    return missing


def allow_topics(settings: Settings, role: KafkaRole, topics: list[str],
                 operations: tuple[str, ...]) -> None:
    """Let `role` use topics no file declares (a connector file outside the repository, a
    test's or a benchmark's own topic): the operator's grant, made where it creates them."""
    add_grants(settings, [Grant(role, "topic", "literal", topic, operation)
                          for topic in topics for operation in operations])


__all__ = ["ACLS_FILE", "READ", "WRITE", "AclFileError", "AclPlan", "Grant", "add_grants",
           "allow_topics", "apply", "consumed_topics", "desired_grants", "live_grants",
           "load_acls_file", "plan"]

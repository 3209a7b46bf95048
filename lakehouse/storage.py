"""Where lakehouse tables live and how delta-rs and Spark name them, from the project
configuration (never code)."""

from __future__ import annotations

from settings import Settings


def storage_options(settings: Settings, uri: str) -> dict[str, str]:
    """delta-rs `storage_options` for `uri`: S3 credentials and endpoint for s3:// URIs."""
    if not uri.startswith(("s3://", "s3a://")):
        return {}
    try:
        access_key, secret_key = settings.s3.credentials()
    except ValueError as exc:
        raise ValueError(f"cannot open {uri}: {exc}") from exc
    options = {
        "AWS_ENDPOINT_URL": settings.s3.endpoint,
        "AWS_ACCESS_KEY_ID": access_key,
        "AWS_SECRET_ACCESS_KEY": secret_key,
        "AWS_REGION": settings.s3.region,
        # path-style addressing: buckets are not DNS names on a local S3 server
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
    }
    if settings.s3.endpoint.startswith("http://"):
        options["AWS_ALLOW_HTTP"] = "true"
    return options


def table_uri(settings: Settings, name: str) -> str:
    """URI of the lakehouse table `name`."""
    return f"{settings.tables_uri}/{name}"


def spark_uri(uri: str) -> str:
    """`uri` as Spark's Hadoop file systems name it: S3 goes through S3A (`s3a://`)."""
    return "s3a://" + uri[len("s3://"):] if uri.startswith("s3://") else uri


def delta_path_sql(uri: str) -> str:
    """delta.`<uri>`: the Delta table at `uri` in Spark SQL (resolved by delta-spark at
    each statement, so a view over it always reads the newest version)."""
    location = spark_uri(uri)
    if "`" in location:
        raise ValueError(f"table location {location!r}: a backtick cannot be quoted")
    return f"delta.`{location}`"

"""What ``sparklog.spark.register`` adds to PySpark in the driver, for format ``sparklog`` only.

A Python data source runs in Python worker processes; whatever it raises reaches the user
as the last lines of a long traceback behind a Spark error class. So that the first line
says what is wrong, the options of a ``sparklog`` read or write are checked in the driver,
with the DataSource's own rules (``sparklog.datasource.options``: ``reads``, ``writes``),
before Spark is asked: a wrong option raises ``OptionError`` right where the user called
``load``, ``save`` or ``start``. What the read planner would refuse first is checked there
as well (``check_sources``): the path must hold sparklog storage (``NoStorageError``), a
read's topics must exist (``OptionError`` naming ``subscribe`` or ``assign``; a stream
with ``failOnDataLoss=false`` may wait for them), and
with ``kafka.bootstrap.servers`` the principal must be allowed to READ them
(``TopicAuthorizationError``). Typed keys and values are checked there too: the subject
and version exist in the registry and are of the format asked for (reads), the DataFrame's
column matches the subject's schema or can be registered (writes).

Also: ``df.write.format("sparklog").save()`` accepts Spark's default save mode,
ErrorIfExists, and appends, as Spark's Kafka sink does (a log has nothing that could
already exist). Spark refuses that mode for every Python data source before the source
sees it (UNSUPPORTED_DATA_SOURCE_SAVE_MODE), so the writer asks for Append in its place.
Ignore and Overwrite are still refused, as the Kafka sink refuses them.

How: PySpark's ``DataFrameReader``, ``DataStreamReader``, ``DataFrameWriter`` and
``DataStreamWriter`` remember the format and options they are given, and their ``load``,
``save`` and ``start`` check them when the format is ``sparklog``; every other format goes
through untouched. Installed once per process (``install``).

Why wrapping PySpark's methods cannot be avoided: ``load``, ``save`` and ``start`` are the
only points where this (the driver's) Python process sees a ``sparklog`` read's or write's
options. PySpark has no hook there, and the source's own code runs in Python worker
processes the JVM starts (``DataSource.schema``, and a stream's reader with its
``latestOffset`` and ``commit``), whose exceptions reach the user wrapped. For the same
reason a stream's ``load`` is where a secured group's client settings are handed to the
group-offsets listener (``group_offsets.remember``): the listener runs here, hears only a
query's progress, and the progress carries no passwords. The listener itself is added by
``register``, once per session, and does not depend on these wrappers: a PLAINTEXT group
is committed from the progress alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from sparklog.datasource import ADMISSION_CONTROL, SPARK_VERSION
from sparklog.datasource.options.schemas import JVM_PLAN_OPTION, jvm_plan_option
from sparklog.errors import OptionError

SPARKLOG = "sparklog"
_ERROR_IF_EXISTS = ("error", "errorifexists", "default")
_installed = False


def _text(value: Any) -> str:
    """An option value as PySpark passes it to the JVM."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _given(obj: Any) -> dict[str, str]:
    found: dict[str, str] | None = getattr(obj, "_sparklog_options", None)
    if found is None:
        found = {}
        obj._sparklog_options = found
    return found


def _merged(obj: Any, options: dict[str, Any]) -> dict[str, str]:
    """The options ``obj`` was given, then those of the ``load``/``save``/``start`` call."""
    return {**_given(obj), **{k: _text(v) for k, v in options.items()}}


def _is_sparklog(obj: Any, format: Any) -> bool:
    name = format if format is not None else getattr(obj, "_sparklog_format", None)
    return str(name or "").strip().lower() == SPARKLOG


def _remember(cls: Any) -> None:
    """Make ``cls`` (a PySpark reader or writer) remember its format and options."""
    plain_format, plain_option, plain_options = cls.format, cls.option, cls.options

    @functools.wraps(plain_format)
    def format(self: Any, source: str) -> Any:
        self._sparklog_format = source
        return plain_format(self, source)

    @functools.wraps(plain_option)
    def option(self: Any, key: str, value: Any) -> Any:
        _given(self)[key] = _text(value)
        return plain_option(self, key, value)

    @functools.wraps(plain_options)
    def options(self: Any, **options: Any) -> Any:
        _given(self).update({k: _text(v) for k, v in options.items()})
        return plain_options(self, **options)

    cls.format, cls.option, cls.options = format, option, options


def _read_check(parse: Callable[[dict[str, str]], Any]) -> Callable[..., Any]:
    def wrap(plain_load: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(plain_load)
        def load(
            self: Any, path: Any = None, format: Any = None, schema: Any = None, **options: Any
        ) -> Any:
            if not _is_sparklog(self, format):
                return plain_load(self, path, format, schema, **options)
            given = _merged(self, options)
            if isinstance(path, str):
                given["path"] = path
            o = parse(given)
            check_sources(o)
            decoding = _jvm_decoding(self._spark, o)
            typed = decoding.fields if decoding else ()
            plan = {t.field: (t.version, t.jvm_writers) for t in typed if t.jvm_writers}
            self.option(JVM_PLAN_OPTION, jvm_plan_option(plan))
            df = plain_load(self, path, format, schema, **options)
            if decoding is None:
                return df
            from sparklog.schemas.spark import jvm_decode

            return jvm_decode(df, decoding)

        return load

    return wrap


def check_sources(o: Any) -> None:
    """Refuse, here in the driver, a read the planner would refuse in a Python worker:
    a path without sparklog storage, a batch read's topic or partition that does not
    exist, a topic the principal may not READ. A stream with ``failOnDataLoss=false`` may
    name missing topics at ``load`` (a restarted query skips a topic deleted meanwhile):
    its READ check covers the topics that exist, and the stream checks the others when it
    first plans them; with ``true`` a missing topic fails the query either way, here
    with the message first."""
    from sparklog.datasource.options.reads import StreamOptions
    from sparklog.datasource.plan import ReadPlanner
    from sparklog.kafka.security_admin import require_read_access
    from sparklog.storage import Storage

    plan = ReadPlanner.of(o)
    strict = not isinstance(o, StreamOptions) or o.fail_on_data_loss
    plan.topic_partitions(Storage(o.path).require(), strict=strict)
    if o.client is not None:
        require_read_access(o.client, sorted(plan.topic_ids))


def _jvm_decoding(spark: Any, o: Any) -> Any:
    """The read's typed columns resolved (reader versions fixed now), with the Avro ones
    planned for the JVM (``decodeIn``: ``sparklog.schemas.spark.jvm_decode`` decodes every
    live version of the subject, each resolved to the reader's); None if no column is
    decoded there.
    A union reader schema (``jvm_decodable``) is decoded in Python whatever ``decodeIn``
    says."""
    import dataclasses

    from sparklog.datasource.scan import decoding_for
    from sparklog.schemas.spark import avro_in_jvm, jvm_decodable, writer_ids

    schemas = o.schemas
    if schemas is not None:
        schemas = dataclasses.replace(schemas, jvm_plan=None)  # the user's view, unplanned
    decoding = decoding_for(schemas, o.path)
    if decoding is None or schemas is None or schemas.decode_in == "python":
        return None
    if not any(t.format == "avro" for t in decoding.fields):
        return None
    if not avro_in_jvm(spark):
        if schemas.decode_in == "jvm":
            raise OptionError(
                "decodeIn=jvm needs Spark's Avro functions (the spark-avro jar, "
                "org.apache.spark:spark-avro_2.13, on spark.jars; docs/jvm.md)"
            )
        return None
    source = decoding.source
    fields = tuple(
        # every live version now, newer than the reader's too (from_avro resolves a newer
        # writer to an older reader): only schemas registered later are left to Python
        dataclasses.replace(
            t, jvm_writers=writer_ids(source, t.subject, source.latest(t.subject).version)
        )
        if t.format == "avro" and jvm_decodable(t)
        else t
        for t in decoding.fields
    )
    if not any(t.jvm_writers for t in fields):
        return None
    return dataclasses.replace(decoding, fields=fields)


def check_stream_features(o: Any, admission_control: bool) -> None:
    """Refuse the options a Spark without admission control for Python streaming sources
    (before 4.2) would silently ignore."""
    if admission_control:
        return
    for name, value in (
        ("maxOffsetsPerTrigger", o.max_offsets_per_trigger),
        ("minOffsetsPerTrigger", o.min_offsets_per_trigger),
    ):
        if value:
            raise OptionError(
                f"option {name} needs Spark 4.2 or newer (admission control of Python "
                f"streaming sources); this session's PySpark is {SPARK_VERSION[0]}."
                f"{SPARK_VERSION[1]}"
            )


def _stream_options(given: dict[str, str]) -> Any:
    """``stream_options``; the group's broker settings are kept for the listener's commits
    (``sparklog.datasource.group_offsets.remember``; see the module docstring)."""
    from sparklog.datasource.group_offsets import remember
    from sparklog.datasource.options.reads import stream_options

    o = stream_options(given)
    check_stream_features(o, ADMISSION_CONTROL)
    if o.group and o.client is not None:
        remember(o.group, o.client)
    return o


def install() -> None:
    """Wrap PySpark's readers and writers (see the module docstring); once per process."""
    global _installed
    if _installed:
        return
    from pyspark.sql.readwriter import DataFrameReader, DataFrameWriter
    from pyspark.sql.streaming.readwriter import DataStreamReader, DataStreamWriter

    from sparklog.datasource.options.reads import batch_options
    from sparklog.datasource.options.writes import write_options

    for cls in (DataFrameReader, DataStreamReader, DataFrameWriter, DataStreamWriter):
        _remember(cls)
    DataFrameReader.load = _read_check(batch_options)(DataFrameReader.load)  # type: ignore[method-assign]
    DataStreamReader.load = _read_check(_stream_options)(DataStreamReader.load)  # type: ignore[method-assign]

    plain_mode, plain_save = DataFrameWriter.mode, DataFrameWriter.save

    @functools.wraps(plain_mode)
    def mode(self: Any, saveMode: str | None) -> Any:
        if saveMode is not None:
            self._sparklog_mode = str(saveMode).strip().lower()
        return plain_mode(self, saveMode)

    @functools.wraps(plain_save)
    def save(
        self: Any,
        path: Any = None,
        format: Any = None,
        mode: Any = None,
        partitionBy: Any = None,
        **options: Any,
    ) -> None:
        if _is_sparklog(self, format):
            write_options(_merged(self, options), self._df.schema)
            chosen = (
                str(mode).lower() if mode is not None else getattr(self, "_sparklog_mode", None)
            )
            if chosen is None or chosen in _ERROR_IF_EXISTS:
                mode = "append"
        plain_save(self, path, format, mode, partitionBy, **options)

    plain_start = DataStreamWriter.start

    @functools.wraps(plain_start)
    def start(
        self: Any,
        path: Any = None,
        format: Any = None,
        outputMode: Any = None,
        partitionBy: Any = None,
        queryName: Any = None,
        **options: Any,
    ) -> Any:
        if _is_sparklog(self, format):
            write_options(_merged(self, options), self._df.schema)
        return plain_start(self, path, format, outputMode, partitionBy, queryName, **options)

    DataFrameWriter.mode = mode  # type: ignore[method-assign]
    DataFrameWriter.save = save  # type: ignore[method-assign]
    DataStreamWriter.start = start  # type: ignore[method-assign]
    _installed = True

"""The append service: what becomes of a produce request's records (Kafka's
``ReplicaManager.appendRecords`` with its ``LogValidator``).

Contract. ``AppendService.append_records(entries, acks=..., transactional_id=...)`` takes
the partitions of one request, each ``(topic, partition, records)`` with ``records`` the
raw bytes of the request's record set, the topic known (the caller authorized it and
created it if it had to), and returns one ``AppendOutcome`` per entry, in order:

- appended: ``base_offset``, ``log_append_time_ms`` (-1 unless the topic stamps
  LogAppendTime), ``log_start_offset``; ``error`` None;
- refused, nothing of the batch written: ``error`` says why (a ``SparkLogError``, or a
  ``ValueError`` for a malformed batch; ``RecordsRefusedError`` names the records,
  ``record_errors``), offsets -1;
- appended but not made durable, never acknowledged: ``error`` a ``NotDurableError``
  (``UnconfirmedAppendError`` when leadership was lost after the append),
  ``base_offset`` -1.

What it decides, per partition, before the single append: one batch per partition, its
size against ``max.message.bytes``, its decoding (magic, CRC, decompression limit; the
codec, ``sparklog.kafka.records``), a key on every record of a compacted topic, broker-side
schema validation (only where a topic turned it on), a transactional batch against the
transaction coordinator (KIP-890; a fenced epoch is INVALID_PRODUCER_EPOCH, as Kafka's
produce path answers). The log checks idempotence and appends in one step. Every
partition is appended before any durability is awaited, so one request's partitions share
fsyncs with each other and with other requests; with ``acks=0`` durability is awaited in
the background (the records must still become visible) and the outcomes carry no
durability error. ``check_acks`` is Kafka's rule for ``acks`` (callers check it before
anything else of the request).

The cluster fence's rules: a sequence error (OUT_OF_ORDER_SEQUENCE_NUMBER,
UNKNOWN_PRODUCER_ID, ...) stands only once the fence confirms this broker still leads the
partition (``_confirmed``); records whose leadership check failed after the append are
``UnconfirmedAppendError`` (REQUEST_TIMED_OUT, never NOT_LEADER_OR_FOLLOWER: see
``_not_durable``).

Cost: no Python work per record; a batch is decoded once, into Arrow columns, and appended
as is. Schema validation and the metrics counters cost nothing on topics and brokers
without them. Runs on the broker's event loop; the log's own locks make the append one
step whatever thread calls it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparklog.broker.partitions import PartitionHandle, PartitionManager
from sparklog.broker.schema_registry.validation import check_records
from sparklog.errors import (
    DuplicateSequenceError,
    InvalidBatchError,
    InvalidProducerEpochError,
    InvalidRecordsError,
    InvalidRequiredAcksError,
    LeaseLostError,
    LogClosedError,
    NotDurableError,
    NotLeaderError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    RecordsRefusedError,
    RecordTooLargeError,
    SparkLogError,
    UnconfirmedAppendError,
    UnknownProducerError,
)
from sparklog.kafka.records import (
    CODECS,
    PRODUCER_CODEC,
    DecodedBatch,
    decode_batch,
    split_batches,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from sparklog.broker.coordinators.transactions import TransactionCoordinator
    from sparklog.broker.observability.metrics import BrokerMetrics
    from sparklog.broker.schema_registry.service import SchemaRegistryService
    from sparklog.storage.config import TopicConfig

log = logging.getLogger(__name__)

_SEQUENCE_ERRORS = (
    DuplicateSequenceError,
    OutOfOrderSequenceError,
    UnknownProducerError,
    InvalidProducerEpochError,
)
#: the longest a produce request waits for a take-over of its partitions in progress
TAKE_OVER_WAIT_S = 10.0
#: what a failed leadership check after the append raises (the fence, a closed log)
_LEADERSHIP_LOST = (NotLeaderError, LogClosedError, LeaseLostError)
#: acks=0 durability waits in flight (kept referenced until done)
_BACKGROUND: set[asyncio.Task[None]] = set()


@dataclass(slots=True)
class AppendOutcome:
    """What became of one partition's records (module docstring): appended, refused
    (``error``), or appended and not made durable (``error`` a ``NotDurableError``)."""

    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error: Exception | None = None

    @property
    def record_errors(self) -> list[tuple[int, str]]:
        """(index in the batch, why) of the records that got the batch refused (KIP-467)."""
        return self.error.record_errors if isinstance(self.error, RecordsRefusedError) else []


class AppendService:
    """Checks, appends and makes durable the records of produce requests (module
    docstring). One per broker."""

    def __init__(
        self,
        manager: PartitionManager,
        transactions: TransactionCoordinator,
        registry: SchemaRegistryService | None = None,
        metrics: BrokerMetrics | None = None,
    ) -> None:
        self.manager = manager
        self.transactions = transactions
        self.registry = registry
        self.metrics = metrics

    @staticmethod
    def check_acks(acks: int) -> None:
        """Kafka's rule: ``acks`` is 0 (no answer), 1 or -1 (all replicas: here, the fsync)."""
        if acks not in (0, 1, -1):
            raise InvalidRequiredAcksError(f"acks must be 0, 1 or -1 (all), not {acks}")

    async def append_records(
        self,
        entries: Sequence[tuple[str, int, bytes | None]],
        *,
        acks: int,
        transactional_id: str | None = None,
    ) -> list[AppendOutcome]:
        """Append every entry, then (``acks`` 1 or -1) await their durability; one outcome
        per entry, in order."""
        self.check_acks(acks)
        gates = []
        if self.manager.taking:  # a take-over in progress: its batches wait, in order
            keys = {(topic, partition) for topic, partition, _ in entries}
            gates = await self.manager.until_taken_over(keys, TAKE_OVER_WAIT_S)
        outcomes: list[AppendOutcome] = []
        waits: list[tuple[AppendOutcome, PartitionHandle, int]] = []
        try:
            for topic, partition, records in entries:
                try:
                    outcome, handle, upto = self._append_one(
                        topic, partition, records, transactional_id
                    )
                except (SparkLogError, ValueError) as e:
                    outcomes.append(AppendOutcome(error=await self._refused(topic, partition, e)))
                    continue
                outcomes.append(outcome)
                waits.append((outcome, handle, upto))
        finally:
            if gates:  # appended: the requests behind this one go on
                self.manager.passed(gates)
        if acks == 0:
            for _outcome, handle, upto in waits:
                task = asyncio.get_running_loop().create_task(
                    self.manager.wait_durable(handle, upto)
                )
                _BACKGROUND.add(task)
                task.add_done_callback(_background_done)
            return outcomes
        results = await asyncio.gather(
            *(self.manager.wait_durable(h, upto) for _, h, upto in waits),
            return_exceptions=True,
        )
        for (outcome, _h, _upto), result in zip(waits, results, strict=True):
            if isinstance(result, BaseException):
                outcome.base_offset = -1
                outcome.error = _not_durable(result)
        return outcomes

    def _append_one(
        self, topic: str, index: int, records: bytes | None, transactional_id: str | None
    ) -> tuple[AppendOutcome, PartitionHandle, int]:
        """Check and append one partition's batch (not yet durable): its outcome, its
        partition, and the next offset to await."""
        manager = self.manager
        config = manager.topic(topic).config
        handle = manager.partition(topic, index)
        if records is None:
            raise InvalidBatchError("no records")
        raw_batches = split_batches(records)
        if len(raw_batches) != 1:
            raise InvalidBatchError(f"expected one record batch, got {len(raw_batches)}")
        raw = raw_batches[0]
        if len(raw) > config.max_message_bytes:
            raise RecordTooLargeError(
                f"{topic}-{index}: record batch of {len(raw)} bytes exceeds max.message.bytes "
                f"{config.max_message_bytes}"
            )
        batch = decode_batch(raw, max_decompressed=manager.config.max_decompressed_batch_bytes)
        if config.compact:
            _check_keys(topic, index, batch.records)
        if config.value_schema_validation or config.key_schema_validation:
            self._validate_schemas(topic, index, batch.records, config)
        if batch.transactional:
            self._verify_transaction(topic, index, batch, transactional_id)
        result = manager.append(handle, batch)
        if not result.duplicate:
            if manager.wire.enabled and _served_as_produced(handle.log.config, batch):
                manager.wire.put(handle.wire, result.base_offset, batch.count, raw)
            if self.metrics is not None:
                self.metrics.produced(topic, batch.count, len(raw))
        outcome = AppendOutcome(
            result.base_offset, result.log_append_time_ms, handle.log.log_start_offset
        )
        return outcome, handle, result.base_offset + batch.count

    def _validate_schemas(
        self, topic: str, index: int, records: pa.RecordBatch, config: TopicConfig
    ) -> None:
        """Broker-side schema validation (``sparklog.broker.schema_registry.validation``)."""
        if self.registry is None:
            raise InvalidRecordsError(
                f"{topic}-{index}: schema validation is on, but the broker has no schema registry"
            )
        bad = check_records(self.registry, topic, records, config)
        if bad:
            first, why = bad[0]
            raise RecordsRefusedError(
                f"{topic}-{index}: {len(bad)} of {records.num_rows} records refused by schema "
                f"validation; record {first}: {why}",
                bad,
            )

    def _verify_transaction(
        self, topic: str, index: int, batch: DecodedBatch, transactional_id: str | None
    ) -> None:
        if transactional_id is None:
            raise InvalidBatchError("a transactional batch needs the request's transactional id")
        try:
            self.transactions.verify(
                transactional_id, batch.producer_id, batch.producer_epoch, (topic, index)
            )
        except ProducerFencedError as e:
            # Kafka's produce path answers a fenced epoch INVALID_PRODUCER_EPOCH, whatever
            # the coordinator said (AddPartitionsToTxnManager converts PRODUCER_FENCED):
            # clients take only that as fatal here, PRODUCER_FENCED as abortable
            raise InvalidProducerEpochError(f"{topic}-{index}: {e}") from e

    async def _refused(
        self, topic: str, index: int, e: SparkLogError | ValueError
    ) -> SparkLogError | ValueError:
        """The error to answer for a refused batch (logged): a sequence error only once
        confirmed (``_confirmed``)."""
        if not isinstance(e, SparkLogError):
            log.debug("produce to %s-%s refused: %s", topic, index, e)
        elif isinstance(e, _SEQUENCE_ERRORS):
            log.info("produce to %s-%s refused: %s", topic, index, e)
            return await self._confirmed(topic, index, e)
        return e

    async def _confirmed(self, topic: str, index: int, e: SparkLogError) -> SparkLogError:
        """A sequence error is the leader's word only (cluster mode): a deposed leader that
        has not noticed yet judges a retry by a producer state its successor has moved past,
        and an OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID from it would make the
        client bump its producer epoch and send again records that may already be written.
        So the error stands only once the fence confirms this broker still leads the
        partition; else the answer is the fence's (NOT_LEADER_OR_FOLLOWER) and the client
        asks the new leader."""
        handle = self.manager.handles.get((topic, index))
        if not self.manager.cluster or handle is None:
            return e
        try:
            await asyncio.get_running_loop().run_in_executor(None, handle.log.confirm_leadership)
        except SparkLogError as fenced:
            log.info("%s-%d: %s not answered: %s", topic, index, type(e).__name__, fenced)
            return fenced
        return e


def _check_keys(topic: str, index: int, records: pa.RecordBatch) -> None:
    """A compacted topic takes no record without a key (Kafka's LogValidator)."""
    keys = records.column("key")
    if not keys.null_count:
        return
    nulls = [i for i, valid in enumerate(keys.is_valid().to_pylist()) if not valid]
    why = "Compacted topic cannot accept message without key in topic partition"
    raise RecordsRefusedError(
        f"{topic}-{index}: compacted topic cannot accept a record without a key "
        f"(records {nulls[:10]}{'...' if len(nulls) > 10 else ''} of the batch)",
        [(i, f"{why} {topic}-{index}.") for i in nulls],
    )


def _served_as_produced(config: TopicConfig, batch: DecodedBatch) -> bool:
    """A fetch of the log of ``config`` (the one that appended ``batch``) serves ``batch``
    as it was produced: its records stored as they came (no LogAppendTime stamp, no
    compaction to rewrite them later, no producer fields the log drops) and sent back in
    their own codec (``sparklog.broker.wire_cache``)."""
    if config.log_append_time or config.compact or batch.timestamp_type:
        return False
    if batch.producer_id < 0 and (batch.producer_epoch != -1 or batch.base_sequence != -1):
        return False
    return CODECS.get(config.compression_type, 0) in (PRODUCER_CODEC, batch.codec)


def _not_durable(e: BaseException) -> NotDurableError:
    """The error for records appended but never acknowledged. A leadership check that
    failed after the append (cluster mode: another broker leads now) is REQUEST_TIMED_OUT,
    not NOT_LEADER_OR_FOLLOWER: the records are in the file, and the new leader's recovery
    may include them. Kafka clients take NOT_LEADER_OR_FOLLOWER as "not persisted" and,
    should they bump their producer epoch, send such records again under new sequence
    numbers: written twice (bench/cluster.py found it). REQUEST_TIMED_OUT means "may or may
    not be written": the client retries with the same sequence numbers, and the new leader
    answers a batch it holds with its original offsets. A failed fsync is
    KAFKA_STORAGE_ERROR (``sparklog.broker.errors``)."""
    if isinstance(e, _LEADERSHIP_LOST):
        return UnconfirmedAppendError(e)
    return NotDurableError(e)


def _background_done(task: asyncio.Task[None]) -> None:
    _BACKGROUND.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.warning("acks=0 records not made durable: %s", task.exception())

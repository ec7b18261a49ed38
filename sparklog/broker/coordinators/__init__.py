"""The broker's coordinators: state that Kafka keeps in its own internal topics.

``groups`` (the group coordinator: membership, generations, rebalances, session timers),
``group_state`` (a group's state and members, the JoinGroup request and answer as values),
``group_offsets`` (committed consumer-group offsets in ``__consumer_offsets``),
``transactions`` (the transaction coordinator and its log, ``__transaction_state``) and
``producer_ids`` (blocks of producer ids reserved in the storage root). They sit below the
protocol front (``broker.handlers`` call them) and above ``sparklog.storage``; they never
import the front, the Schema Registry or observability.
"""

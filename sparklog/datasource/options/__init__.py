"""Every option of ``format("sparklog")``, validated here and only here: ``reads`` (batch
and stream reads: the names of Spark's Kafka source), ``writes`` (the sink), ``schemas``
(typed keys and values, both), ``kafka`` (the Kafka client options, both). Unknown or
contradictory options are errors (``OptionError``) that name the option.
"""

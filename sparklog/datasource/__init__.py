"""The PySpark Python DataSource ``format("sparklog")``: batch and streaming reader, writer.

``ls`` is the map: ``source`` (the ``DataSource``), ``options`` (every option, validated in
one place), ``plan`` (the read planner of batch and stream reads, driver side), ``scan``
(what a read task does, in executors), ``batch`` and ``stream`` (the two readers),
``writer`` and ``producer`` (the sink). Reads go straight to storage; writes go through the
broker, over ``sparklog.kafka``. Never imports ``sparklog.broker``.
"""

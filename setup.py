"""The one compiled part of sparklog: ``sparklog._columns`` (``sparklog/_columns.c``), the
Kafka record decoder of the produce path. ``optional``: without a C compiler the install
still succeeds and ``sparklog.kafka.records`` decodes with aiokafka's record codec."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "sparklog._columns",
            ["sparklog/_columns.c"],
            optional=True,
            extra_compile_args=["-O2", "-std=c99"],
        ),
    ]
)

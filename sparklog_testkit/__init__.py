"""What sparklog's tests and benchmarks share, and no user needs: it is installed with the
source checkout (``pip install -e .[dev]``; ``setup.py`` leaves it out of the wheel).

- ``processes``: brokers and etcd in child processes (the demo's, from
  ``sparklog.demo.processes``) plus what only tests and benchmarks use: etcd with TLS and
  users, brokers started through another script;
- ``proxy``: a TCP proxy a test can cut;
- ``s3proxy``: an HTTP proxy in front of an S3 server that a test makes fail (5xx answers,
  resets, stalls, lost answers);
- ``chaos``: the broker durability chaos scenario and its checks (tests/broker/test_chaos.py,
  bench/chaos.py).
"""

"""Cluster mode: brokers coordinated through etcd (docs/cluster.md).

``coordination``: the etcd client of a broker - its registration under a lease, the
controller election and the controller epoch that fences every write the controller makes.
"""

"""Connection security and access control: TLS, SASL, SCRAM credentials, Kafka ACLs.

- ``config``: the broker's ``[security]`` settings;
- ``scram``: SCRAM credentials (salted, never the password) and password checks;
- ``store``: users and ACLs, durable and shared by every broker of a storage root;
- ``acls``: Kafka's ACL model and the authorizer that applies it;
- ``sasl``: one connection's SASL exchange (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512);
- ``tls``: the listeners' TLS contexts and the principal of a client certificate.

docs/security.md describes the model as a whole.
"""

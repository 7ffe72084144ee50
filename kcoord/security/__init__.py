"""Security for the Kafka listener, as pure logic (no Ray, no sockets, no clock).

* :mod:`.acl` -- Kafka's ACL model: resource types, operations, permission and pattern
  types (Kafka's numbers, kafka-python's names), ACLs and ACL filters, and the rules
  that match one against the other (DescribeAcls/DeleteAcls) and validate a new ACL.
* :mod:`.authorizer` -- Kafka's authorizer decision: DENY beats ALLOW, super users,
  deny when no ACL matches, the operations that imply DESCRIBE/DESCRIBE_CONFIGS, and
  "may this principal do OP on any resource of a type" (KIP-679's idempotent producers).
* :mod:`.scram` -- SCRAM credentials (salted, hashed; never the password) and the PLAIN
  check against them, on the ``scramp`` library.
* :mod:`.sasl` -- the server side of the PLAIN and SCRAM exchanges, token in, token out.
* :mod:`.principal` -- a TLS client certificate's principal: the subject's RFC 2253
  distinguished name and Kafka's ``ssl.principal.mapping.rules``.
* :mod:`.config` -- ``kafka_security``, the contract of ``local_cluster``/``deploy``/``kcoord up``.

The controller keeps credentials and ACLs (``kcoord.replication.security_metadata``); the
Kafka listener authenticates and authorizes with these modules (``kcoord.kafka.listener_security``).
"""

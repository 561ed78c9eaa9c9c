"""The peers: the same Company reconcile written with controller-runtime and with kopf, measured
beside the Python operator by the ``peers`` figure (:mod:`bench.peers.figure`)."""

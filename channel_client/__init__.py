"""Client-side helpers shared by publisher, subscriber and spark_partitions.

They may use channel_server's shared vocabulary (errors, events, wire, names, tls,
credentials, transport) but never broker code (broker, channel, store, core).
"""

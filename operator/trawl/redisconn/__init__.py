"""Connecting to a pool's Redis: the one client factory (a server, a Redis Cluster, a Sentinel-named master),
the workers' shared connection, the settings resolved from a pool, how full a Redis is, and the Lua files."""

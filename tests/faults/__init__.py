"""Faults of the tests' own between the farm and its services: a proxy that answers S3 errors,
holds requests, trickles and cuts responses (the store), or cuts and delays plain TCP (Redis), and
a local farm whose workers reach the store and Redis through such proxies."""

"""Container images: the lock file, the Debian base, builds, digests, pushes to nodes.

``images.lock`` (repository root) pins every ``FROM`` by digest; builds refuse to go around
it. Images we build are tagged ``dlperf/<name>:<hash of their inputs>`` so that a rebuild with
unchanged inputs is a no-op, and their own digests (image IDs) are recorded. The docker Python
SDK is imported inside functions: loading the plug-ins stays cheap.
"""

"""The SSH transport: node commands over one SSH connection per node, in a container platform."""

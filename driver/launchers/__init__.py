"""In-node launchers: how N training processes start on one node (torchrun, paddle, ...)."""

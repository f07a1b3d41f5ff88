"""The router as a program: its configuration, the server that wires the rooms together, leader election, the autoscaling signals, the command."""

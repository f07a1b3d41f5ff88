"""The router's own HTTP/1.1: the server its proxy listens with, the client it reaches the model servers with, and the headers that cross between."""

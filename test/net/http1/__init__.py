"""HTTP/1.1: requests and responses, bodies, rejections, connections."""

"""The ``bnconvention`` command line. One module per command group; ``main`` wires them and maps errors."""

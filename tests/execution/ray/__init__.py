"""Tests of the ``ray`` execution strategy and of the multi-node Ray cluster fixture (marker ``ray``)."""

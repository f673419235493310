"""The Spark tests' SparkSession is the session-wide ``spark`` fixture of ``tests/conftest.py``
(shared by the Spark tests of every folder)."""

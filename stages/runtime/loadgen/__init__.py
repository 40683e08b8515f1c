"""Load generation: arrival processes (when queries are due) and scenarios (how they are issued
and when the load window ends), after MLPerf LoadGen's rules."""

MIN_PAIR_EPISODES = 2
"""Sampled play of a population needs two episodes per pair of agents at least (one in each seat, and
a standard error); kept here, light, so that the command line's --episodes range reads it without
importing the solvers."""

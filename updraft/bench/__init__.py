"""updraft.bench"""

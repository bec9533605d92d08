"""updraft.engine"""

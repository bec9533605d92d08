"""updraft.models"""

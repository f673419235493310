package org.apache.spark.sql.api.java;

/**
 * Spark's own interface (spark-sql-api, unchanged since Spark 1.3), declared here so the
 * functions compile without Spark's jars: javac reads it, jvm/functions/build.py leaves it out of
 * the jar, and Spark's class is the one loaded at run time.
 */
public interface UDF1<T1, R> extends java.io.Serializable {
  R call(T1 t1) throws Exception;
}

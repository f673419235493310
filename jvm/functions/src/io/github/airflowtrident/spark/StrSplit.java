package io.github.airflowtrident.spark;

import java.util.ArrayList;
import org.apache.spark.sql.api.java.UDF1;

/**
 * Python's {@code str.split()} with no separator, as a Spark SQL function: the words of a string
 * between runs of the characters {@code str.isspace()} accepts, no empty words, {@code null} for
 * {@code null}. airflow-trident's {@code Split} on Spark (docs/performance.md, "The split on the
 * JVM"): Spark's own {@code split} compiles its regular expression for every row.
 *
 * <p>The 29 characters are all in the Basic Multilingual Plane, so a UTF-16 unit that is half of
 * a surrogate pair is never one of them. tests/runtime/test_jvm_split.py checks the set against
 * the running Python's, code point by code point.
 */
public final class StrSplit implements UDF1<String, String[]> {
  private static final long serialVersionUID = 1L;
  private static final String[] NONE = new String[0];

  /** Whether {@code c} is one of the characters {@code str.isspace()} accepts. */
  static boolean isSpace(char c) {
    if (c <= ' ') {
      return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
    }
    if (c < 0x85) {
      return false;
    }
    return c == 0x85
        || c == 0xa0
        || c == 0x1680
        || (c >= 0x2000 && c <= 0x200a)
        || c == 0x2028
        || c == 0x2029
        || c == 0x202f
        || c == 0x205f
        || c == 0x3000;
  }

  @Override
  public String[] call(String text) {
    if (text == null) {
      return null;
    }
    int n = text.length();
    ArrayList<String> words = null;
    int i = 0;
    while (i < n) {
      while (i < n && isSpace(text.charAt(i))) {
        i++;
      }
      int j = i;
      while (j < n && !isSpace(text.charAt(j))) {
        j++;
      }
      if (j > i) {
        if (words == null) {
          words = new ArrayList<>();
        }
        words.add(text.substring(i, j));
      }
      i = j;
    }
    return words == null ? NONE : words.toArray(NONE);
  }
}

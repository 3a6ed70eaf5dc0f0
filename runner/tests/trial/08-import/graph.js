export const meta = {name: 'import', slug: 'import', version: '1'};
import { readFile } from "fs";
export default async function (args, g) {
  return readFile;
}
